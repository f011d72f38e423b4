// Minimal CDP client on the `ws` package: sends headers, keeps the query.

import WebSocket from "ws";

/**
 * Resolves an http(s) discovery URL to its webSocketDebuggerUrl by fetching
 * /json/version on the same origin, keeping the query string and headers.
 * ws(s) URLs are returned unchanged.
 */
export async function resolveWsUrl(url, headers) {
  if (!/^https?:/i.test(url)) return url;
  const u = new URL(url);
  u.pathname = "/json/version";
  const res = await fetch(u, { headers });
  if (!res.ok) throw new Error(`GET ${u.pathname} -> HTTP ${res.status}`);
  const j = await res.json();
  if (!j.webSocketDebuggerUrl) throw new Error("no webSocketDebuggerUrl in /json/version");
  return j.webSocketDebuggerUrl;
}

export async function cdpSession(url, headers, { perMessageDeflate = false } = {}) {
  const wsUrl = await resolveWsUrl(url, headers);
  const ws = new WebSocket(wsUrl, { headers, perMessageDeflate, maxPayload: 256 * 1024 * 1024 });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`WebSocket upgrade refused: HTTP ${res.statusCode}`)));
  });
  let nextId = 1;
  const pending = new Map();
  const waiters = [];
  ws.on("message", (data) => {
    const msg = JSON.parse(data.toString());
    if (msg.id !== undefined) {
      const p = pending.get(msg.id);
      if (!p) return;
      pending.delete(msg.id);
      if (msg.error) p.reject(new Error(`${p.method}: ${msg.error.message}`));
      else p.resolve(msg.result);
    } else {
      for (let i = waiters.length - 1; i >= 0; i--) {
        const w = waiters[i];
        if (w.method === msg.method && (w.sessionId === undefined || w.sessionId === msg.sessionId)) {
          waiters.splice(i, 1);
          w.resolve(msg.params);
        }
      }
    }
  });
  const closed = new Promise((resolve) => ws.once("close", (code) => {
    for (const p of pending.values()) p.reject(new Error(`socket closed (${code}) during ${p.method}`));
    pending.clear();
    resolve(code);
  }));
  return {
    ws,
    closed,
    send(method, params = {}, sessionId) {
      const id = nextId++;
      const msg = { id, method, params };
      if (sessionId) msg.sessionId = sessionId;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject, method });
        ws.send(JSON.stringify(msg));
      });
    },
    waitFor(method, sessionId) {
      return new Promise((resolve) => waiters.push({ method, sessionId, resolve }));
    },
    async close() {
      if (ws.readyState === WebSocket.CLOSED) return;
      ws.close();
      await closed;
    },
  };
}
