// inspector-scope.mjs --url WS --session ID (--mint BIN --key-file PEM | --base URL --key KEY)
//                     [--short-ttl SECONDS]
//
// What a one-page live-view credential's inspector socket reaches (issue 41, item 1): the
// session's client (--url) opens two tabs, A and B (B with a secret in its text), and puts a
// cookie for another site in the browser's jar; a control credential for A alone — minted
// (`BIN token --viewer control --page A`) or, with --base, A's `debuggerUrl` from the stock
// SDK's `sessions.debug(id, {expiresIn})` — opens A's inspector socket
// (`/inspector/<credential>/page/<A>`), which then asks for: A's own text, the target list,
// an attach to B and B's text through it, the browser's cookies (three ways), a handoff and a
// `chrome://` page. Then a credential valid --short-ttl seconds (default 5) opens another
// socket, which answers and is waited on until it closes. Prints every answer (no
// credential): {"ok":true, own, answers:{...}, short:{code, reason, afterMs}}.

import { execFileSync } from "node:child_process";
import WebSocket from "ws";
import { requireArg, run } from "./lib.mjs";

const MARKER_A = "tab-a-is-shown";
const SECRET_B = "secret-of-tab-b";
const COOKIE = "secret-cookie-of-the-jar";
const page = (title, text) => `data:text/html,<title>${title}</title><p>${text}</p>`;

function mint(args, id, ttl) {
  const argv = ["token", "--session-id", requireArg(args, "session"), "--viewer", "control",
    "--page", id, "--ttl", String(ttl)];
  const env = { ...process.env, WALLCRAWLER_JWT_PRIVATE_KEY_FILE: requireArg(args, "key-file") };
  return execFileSync(requireArg(args, "mint"), argv, { env, encoding: "utf8" }).trim();
}

/** The inspector socket's URL for page `id` with a credential valid `ttl` seconds. */
async function socketUrl(args, host, id, ttl) {
  if (!args.base) return `ws://${host}/inspector/${mint(args, id, ttl)}/page/${id}`;
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  const bb = new Browserbase({ apiKey: requireArg(args, "key"), baseURL: args.base, maxRetries: 0 });
  const debug = await bb.sessions.debug(requireArg(args, "session"), { expiresIn: ttl });
  const entry = debug.pages.find((p) => p.id === id);
  if (!entry) throw new Error(`sessions.debug() lists no page ${id}`);
  const q = new URL(entry.debuggerUrl).searchParams;
  return q.has("wss") ? `wss://${q.get("wss")}` : `ws://${q.get("ws")}`;
}

/** An open socket, and `send(method, params, sessionId)` answering with Chrome's (or the
 *  proxy's) answer. */
async function open(url) {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
  });
  let next = 1;
  const waiting = new Map();
  ws.on("message", (data) => {
    const m = JSON.parse(data.toString());
    if (m.id !== undefined && waiting.has(m.id)) {
      waiting.get(m.id)(m);
      waiting.delete(m.id);
    }
  });
  const send = (method, params = {}, sessionId) =>
    new Promise((resolve) => {
      const id = next++;
      waiting.set(id, resolve);
      ws.send(JSON.stringify(sessionId ? { id, method, params, sessionId } : { id, method, params }));
    });
  return { ws, send };
}

run(async (args) => {
  const url = requireArg(args, "url");
  const shortTtl = Number(args["short-ttl"] ?? 5);
  const { default: puppeteer } = await import("puppeteer-core");
  const session = await puppeteer.connect({ browserWSEndpoint: url, protocolTimeout: 20000 });
  try {
    const a = await session.newPage();
    await a.goto(page("tab-a", MARKER_A));
    const b = await session.newPage();
    await b.goto(page("tab-b", SECRET_B));
    const idOf = async (p) => {
      const s = await p.createCDPSession();
      const { targetInfo } = await s.send("Target.getTargetInfo");
      if (p === b) {
        await s.send("Network.setCookie", { name: "jar", value: COOKIE, url: "https://bank.example/" });
      }
      await s.detach();
      return targetInfo.targetId;
    };
    const [idA, idB] = [await idOf(a), await idOf(b)];
    const host = new URL(url).host;

    const { ws, send } = await open(await socketUrl(args, host, idA, 60));
    const evalText = { expression: "document.body.innerText", returnByValue: true };
    const own = (await send("Runtime.evaluate", evalText)).result?.result?.value ?? null;
    const answers = {};
    answers.getTargets = await send("Target.getTargets");
    answers.discover = await send("Target.setDiscoverTargets", { discover: true });
    answers.attach = await send("Target.attachToTarget", { targetId: idB, flatten: true });
    const attached = answers.attach.result?.sessionId;
    if (attached) answers.readB = await send("Runtime.evaluate", evalText, attached);
    answers.sendToB = await send("Target.sendMessageToTarget", {
      targetId: idB, message: JSON.stringify({ id: 1, method: "Runtime.evaluate", params: evalText }),
    });
    answers.allCookies = await send("Network.getAllCookies");
    answers.storageCookies = await send("Storage.getCookies");
    answers.cookiesOfAnotherSite = await send("Network.getCookies", { urls: ["https://bank.example/"] });
    answers.handoff = await send("Wallcrawler.requestHandoff", { reason: "take over", timeout: 60 });
    answers.browserPage = await send("Page.navigate", { url: "chrome://inspect/#pages" });
    answers.ownAgain = await send("Runtime.evaluate", { expression: "1 + 1", returnByValue: true });
    ws.close();

    // A socket opened with a credential that expires in `shortTtl` seconds.
    const asked = Date.now();
    const short = await open(await socketUrl(args, host, idA, shortTtl));
    const answered = (await short.send("Runtime.evaluate", { expression: "2 + 2", returnByValue: true }))
      .result?.result?.value ?? null;
    const closed = await new Promise((resolve) =>
      short.ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })));
    return {
      own, idB, answers,
      short: { answered, ...closed, afterMs: Date.now() - asked },
    };
  } finally {
    session.disconnect();
  }
}, { defaultTimeoutMs: 90000 });
