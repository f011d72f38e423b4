// file-guard.mjs --url <ws endpoint> --uploads <dir> --inside <file in uploads>
//                --outside <path>... (comma-separated) --extension <dir> --data-dir <dir>
//
// What a client may reach through the proxy, over a bare `ws` socket (raw CDP, flattened
// sessions) and Puppeteer:
// - Extensions.loadUnpacked of a real extension directory, plainly, escaped
//   ("Extensions.loadUnpack\u0065d"), fragmented into three frames, and padded past 64 KiB:
//   each answer recorded (an error, or a result), then Browser.getVersion on the same socket;
// - DOM.setFileInputFiles naming each --outside path, then what the page's FileReader read;
//   the same for --inside (expected: its exact bytes, base64);
// - Page.navigate to a file: URL in --data-dir;
// - Target.exposeDevToolsProtocol on the page (a browser-wide CDP channel for the page's script),
//   then whether the page sees the binding;
// - Puppeteer's uploadFile with --inside and with the first --outside path.
// Prints {"ok":true,...} with every answer; the Rust test decides.

import WebSocket from "ws";
import { FILE_INPUT_PAGE, READ_FILES, readThrough, requireArg, run } from "./lib.mjs";

const PAGE = FILE_INPUT_PAGE;

/** A raw CDP socket: send(obj or string, {fragments}) → the answer for its id. */
async function rawSocket(url) {
  const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  const waiting = new Map();
  ws.on("message", (data) => {
    const msg = JSON.parse(data.toString());
    if (msg.id !== undefined) waiting.get(msg.id)?.(msg);
  });
  let closeCode = null;
  ws.once("close", (code) => {
    closeCode = code;
    for (const w of waiting.values()) w({ closed: code });
  });
  let next = 100;
  return {
    ws,
    closeCode: () => closeCode,
    /** Sends `text` (JSON with `"id":ID` as a placeholder) and waits for its answer. */
    async call(build, fragments = 1) {
      const id = next++;
      const text = build(id);
      const answer = new Promise((resolve) => waiting.set(id, resolve));
      if (fragments === 1) {
        ws.send(text);
      } else {
        const step = Math.ceil(text.length / fragments);
        for (let i = 0; i < fragments; i++) {
          const piece = text.slice(i * step, (i + 1) * step);
          ws.send(piece, { fin: i === fragments - 1, binary: false });
          if (i === 0) ws.ping();
        }
      }
      return answer;
    },
  };
}

const cmd = (method, params, sessionId) => (id) =>
  JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) });

run(async (args) => {
  const url = requireArg(args, "url");
  const inside = requireArg(args, "inside");
  const outside = requireArg(args, "outside").split(",");
  const extension = requireArg(args, "extension");
  const dataDir = requireArg(args, "data-dir");

  const raw = await rawSocket(url);
  const extensions = {};
  extensions.plain = await raw.call(cmd("Extensions.loadUnpacked", { path: extension }));
  extensions.escaped = await raw.call((id) =>
    `{"id":${id},"method":"Extensions.loadUnpack\\u0065d","params":{"path":${JSON.stringify(extension)}}}`);
  extensions.fragmented = await raw.call(cmd("Extensions.loadUnpacked", { path: extension }), 3);
  extensions.padded = await raw.call((id) =>
    `{"id":${id},"method":"Extensions.loadUnpacked","params":{"path":${JSON.stringify(extension)}}}`
      .replace(`{"id"`, `{${" ".repeat(70 * 1024)}"id"`));
  const version = await raw.call(cmd("Browser.getVersion", {}));

  // A page with a file input, on a flattened session.
  const target = await raw.call(cmd("Target.createTarget", { url: PAGE }));
  const { targetId } = target.result;
  const attached = await raw.call(cmd("Target.attachToTarget", { targetId, flatten: true }));
  const sessionId = attached.result.sessionId;
  await raw.call(cmd("Runtime.enable", {}, sessionId));
  const evaluate = async (expression) => {
    const r = await raw.call(cmd("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true }, sessionId));
    return r.result?.result?.value;
  };
  for (let i = 0; i < 100 && (await evaluate("!!document.getElementById('f')")) !== true; i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const doc = await raw.call(cmd("DOM.getDocument", {}, sessionId));
  const input = await raw.call(cmd("DOM.querySelector", { nodeId: doc.result.root.nodeId, selector: "#f" }, sessionId));
  const nodeId = input.result.nodeId;

  const files = {};
  for (const path of [...outside, inside]) {
    const answer = await raw.call(cmd("DOM.setFileInputFiles", { files: [path], nodeId }, sessionId));
    files[path] = { answer, read: JSON.parse(await evaluate(READ_FILES)) };
    // Empty the input between tries, so a refused try shows no earlier file.
    await raw.call(cmd("DOM.setFileInputFiles", { files: [], nodeId }, sessionId));
  }
  const navigate = await raw.call(cmd("Page.navigate", { url: `file://${dataDir}/local.json` }, sessionId));
  const createFile = await raw.call(cmd("Target.createTarget", { url: `FILE://${dataDir}/` }));
  const expose = await raw.call(cmd("Target.exposeDevToolsProtocol", { targetId, bindingName: "cdp" }));
  const exposed = await evaluate("typeof window.cdp");
  const stillOpen = raw.closeCode() === null;
  raw.ws.close();

  // Puppeteer: uploadFile by path.
  const read = await readThrough(url, { inside, outside: outside[0] });
  const puppeteerRead = {
    [inside]: { error: read.inside.error, read: read.inside.files },
    [outside[0]]: { error: read.outside.error, read: read.outside.files },
  };

  return { extensions, version, files, navigate, createFile, expose, exposed, stillOpen, puppeteer: puppeteerRead };
});
