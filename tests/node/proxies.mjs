// Upstream proxies on 127.0.0.1 for the egress tests, each keeping its own log of what it was
// asked (the host and the user, never the password) and the bytes it carried:
//   httpProxy({ user, pass, port?, standIn? }): HTTP CONNECT with Basic authentication (407
//     otherwise);
//   socks5Proxy({ user, pass }): SOCKS5 with username/password (RFC 1929), CONNECT only.
// Neither ever reaches the network: .test names and loopback addresses are this machine's; any
// other address is refused, and any other name (Chrome's own update and account hosts, an ad network's) is refused (HTTP 502,
// SOCKS5 "not allowed") — or, with `standIn` (a port on 127.0.0.1), answered by that local
// server, whatever the port asked.
// `log` entries: { host, port, user, ok }. `bytes`: tunnelled bytes, both directions.
import http from "node:http";
import net from "node:net";

// Names under .test (which no resolver knows) are this machine: the tests' pages are served on
// 127.0.0.1 under names of their own, so a proxy (which resolves what it is asked) finds them.
const resolve = (host) => (host.endsWith(".test") ? "127.0.0.1" : host);

const loopback = (ip) => (net.isIPv4(ip) ? ip.startsWith("127.") : /^[0:]*:0*1$/.test(ip));

/** Where a tunnel to `host:port` goes: .test names and loopback addresses to this machine,
 *  other names to the proxy's stand-in; null: nowhere (no other address, ever). */
function destination(host, port, standIn) {
  if (host.endsWith(".test") || (net.isIP(host) !== 0 && loopback(host))) return [resolve(host), port];
  return standIn && net.isIP(host) === 0 ? ["127.0.0.1", standIn] : null;
}

function tunnel(client, [to, toPort], proxy, onOpen) {
  const upstream = net.connect(toPort, to, () => {
    onOpen();
    client.on("data", (d) => { proxy.bytes += d.length; });
    upstream.on("data", (d) => { proxy.bytes += d.length; });
    client.pipe(upstream);
    upstream.pipe(client);
  });
  const end = () => { client.destroy(); upstream.destroy(); };
  upstream.on("error", end);
  client.on("error", end);
  client.on("close", end);
  upstream.on("close", end);
}

export async function httpProxy({ user, pass, port = 0, standIn = null }) {
  const proxy = { log: [], bytes: 0, port: 0, standIn, close: () => server.close() };
  const server = http.createServer((req, res) => { res.writeHead(405); res.end(); });
  server.on("connect", (req, client, head) => {
    const [host, port] = [req.url.slice(0, req.url.lastIndexOf(":")).replace(/^\[|\]$/g, ""), Number(req.url.slice(req.url.lastIndexOf(":") + 1))];
    const auth = req.headers["proxy-authorization"] ?? "";
    const [u, p] = Buffer.from(auth.replace(/^Basic /, ""), "base64").toString().split(":");
    const ok = u === user && p === pass;
    proxy.log.push({ host, port, user: u ?? null, ok, userAgent: req.headers["user-agent"] ?? null });
    if (!ok) {
      client.end("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"t\"\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    const to = destination(host, port, proxy.standIn);
    if (!to) {
      client.end("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    tunnel(client, to, proxy, () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length) client.unshift(head);
    });
  });
  await new Promise((r) => server.listen(port, "127.0.0.1", r));
  proxy.port = server.address().port;
  proxy.url = `http://127.0.0.1:${proxy.port}`;
  return proxy;
}

export async function socks5Proxy({ user, pass }) {
  const proxy = { log: [], bytes: 0, port: 0, close: () => server.close() };
  const server = net.createServer((client) => {
    let buf = Buffer.alloc(0);
    let stage = "greeting";
    let who = null;
    const need = (n) => buf.length >= n;
    const onData = (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        if (stage === "greeting") {
          if (!need(2) || !need(2 + buf[1])) return;
          const methods = [...buf.subarray(2, 2 + buf[1])];
          buf = buf.subarray(2 + buf[1]);
          if (!methods.includes(2)) { client.end(Buffer.from([5, 0xff])); return; }
          client.write(Buffer.from([5, 2]));
          stage = "auth";
        } else if (stage === "auth") {
          if (!need(2)) return;
          const ulen = buf[1];
          if (!need(3 + ulen) || !need(3 + ulen + buf[2 + ulen])) return;
          const u = buf.subarray(2, 2 + ulen).toString();
          const plen = buf[2 + ulen];
          const p = buf.subarray(3 + ulen, 3 + ulen + plen).toString();
          buf = buf.subarray(3 + ulen + plen);
          who = u;
          if (u !== user || p !== pass) {
            proxy.log.push({ host: null, port: null, user: u, ok: false });
            client.end(Buffer.from([1, 1]));
            return;
          }
          client.write(Buffer.from([1, 0]));
          stage = "request";
        } else if (stage === "request") {
          if (!need(5)) return;
          const atyp = buf[3];
          let host; let len;
          if (atyp === 1) { len = 10; if (!need(len)) return; host = [...buf.subarray(4, 8)].join("."); }
          else if (atyp === 3) { len = 7 + buf[4]; if (!need(len)) return; host = buf.subarray(5, 5 + buf[4]).toString(); }
          else if (atyp === 4) { len = 22; if (!need(len)) return; host = buf.subarray(4, 20).toString("hex").match(/.{4}/g).join(":"); }
          else { client.destroy(); return; }
          const port = buf.readUInt16BE(len - 2);
          const rest = buf.subarray(len);
          proxy.log.push({ host, port, user: who, ok: true });
          client.removeListener("data", onData);
          stage = "open";
          const to = destination(host, port, null);
          if (!to) {
            client.end(Buffer.from([5, 2, 0, 1, 0, 0, 0, 0, 0, 0]));
            return;
          }
          tunnel(client, to, proxy, () => {
            client.write(Buffer.from([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]));
            if (rest.length) client.unshift(rest);
          });
          return;
        } else return;
      }
    };
    client.on("data", onData);
    client.on("error", () => client.destroy());
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  proxy.port = server.address().port;
  proxy.url = `socks5://127.0.0.1:${proxy.port}`;
  return proxy;
}
