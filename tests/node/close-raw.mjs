// close-raw.mjs --url <ws endpoint> --form <escaped|fragmented|padded> [--timeout-ms N]
//
// Sends CDP Browser.close over a bare `ws` socket in a form a byte-pattern check would miss:
//   escaped:    {"method":"Browser.clos\u0065"} (a JSON escape);
//   fragmented: one text message in three frames, with a ping between two of them;
//   padded:     whitespace padding past 64 KiB (the proxy's inspected size before it judged
//               every message).
// First sends Browser.getVersion (so the connection has carried a normal command), then the
// close, then waits until the socket closes.
// Prints {"ok":true,"closeCode":N,"closeAnswered":bool}: closeAnswered is whether Chrome
// answered the close itself (it does only when the proxy let the command through).

import WebSocket from "ws";
import { requireArg, run } from "./lib.mjs";

run(async (args) => {
  const url = requireArg(args, "url");
  const form = requireArg(args, "form");
  const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade refused: HTTP ${res.statusCode}`)));
  });
  const answers = new Map();
  const waiting = new Map();
  ws.on("message", (data) => {
    const msg = JSON.parse(data.toString());
    if (msg.id === undefined) return;
    answers.set(msg.id, msg);
    waiting.get(msg.id)?.(msg);
  });
  const closed = new Promise((resolve) => ws.once("close", (code) => resolve(code)));
  const answered = (id) => new Promise((resolve) => waiting.set(id, resolve));

  const version = answered(1);
  ws.send(JSON.stringify({ id: 1, method: "Browser.getVersion" }));
  const v = await version;
  if (!v.result?.product) throw new Error(`Browser.getVersion: ${JSON.stringify(v)}`);

  switch (form) {
    case "escaped":
      ws.send('{"id":2,"method":"Browser.clos\\u0065"}');
      break;
    case "fragmented":
      ws.send('{"id":2,"meth', { fin: false });
      ws.ping();
      ws.send('od":"Browser.cl', { fin: false });
      ws.send('ose"}', { fin: true });
      break;
    case "padded":
      ws.send('{"id":2,"method":"Browser.close"' + " ".repeat(70 * 1024) + "}");
      break;
    default:
      throw new Error(`unknown --form ${form}`);
  }
  const closeCode = await closed;
  return { closeCode, closeAnswered: answers.has(2) };
});
