// logs.mjs --base <baseURL> --key <apiKey> --project <projectId> --scenario <name>
//
// A session's log on the local platform: the stock Browserbase SDK creates the session and
// reads `sessions.logs.list(id)`, Puppeteer drives it (pages served on 127.0.0.1).
//   logged:   goto /first; while the session runs, polls the log until it holds that
//             Page.navigate; then goto /second, a Runtime.evaluate through a CDP session,
//             disconnect, release, wait for endedAt, and read the log again.
//   unlogged: browserSettings.logSession false; goto /first, release, wait for endedAt, read.
//   raw:      a raw CDP client (a WebSocket, no Runtime/Page/Log domain enabled) opens a page
//             that logs a console line and throws; polls the log until both are there;
//             navigates it again, polls until that navigation is there; crashes the page
//             (Page.crash); polls until the crash is there; release, wait, read.
// Prints {"ok":true,...}: the session's times, its token, and the log entries (whole), for the
// Rust test to judge.
import { requireArg, run, serveTwoPages, until } from "./lib.mjs";

async function client(args) {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  return new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
}

const pages = () => serveTwoPages((path) => `<title>${path}</title><script>console.log("on ${path}")</script>`);

const navigationTo = (logs, url) =>
  logs.find((e) => e.method === "Page.navigate" && e.request?.params?.url === url);

async function ended(bb, projectId, id) {
  await bb.sessions.update(id, { status: "REQUEST_RELEASE", projectId });
  return until("the session's end", 30000, async () => {
    const s = await bb.sessions.retrieve(id);
    return s.endedAt ? s : undefined;
  });
}

async function logged(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const urls = await pages();
  const session = await bb.sessions.create({ projectId });
  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.connect({ browserWSEndpoint: session.connectUrl });
  const page = (await browser.pages())[0] ?? (await browser.newPage());
  await page.goto(urls.first);
  // While the session runs: the navigation is already in the log.
  const running = await until("the first navigation in the log", 10000, async () => {
    const logs = await bb.sessions.logs.list(session.id);
    return navigationTo(logs, urls.first) ? logs : undefined;
  });
  await page.goto(urls.second);
  const cdp = await page.createCDPSession();
  const evaluated = await cdp.send("Runtime.evaluate", { expression: "6 * 7", returnByValue: true });
  await browser.disconnect();
  const end = await ended(bb, projectId, session.id);
  const logs = await bb.sessions.logs.list(session.id);
  urls.close();
  return {
    sessionId: session.id,
    createdAt: session.createdAt,
    endedAt: end.endedAt,
    token: session.signingKey,
    connectUrl: session.connectUrl,
    first: urls.first,
    second: urls.second,
    evaluated: evaluated.result.value,
    runningMethods: running.map((e) => e.method),
    logs,
  };
}

async function unlogged(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const urls = await pages();
  const session = await bb.sessions.create({ projectId, browserSettings: { logSession: false } });
  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.connect({ browserWSEndpoint: session.connectUrl });
  const page = (await browser.pages())[0] ?? (await browser.newPage());
  await page.goto(urls.first);
  await browser.disconnect();
  await ended(bb, projectId, session.id);
  const logs = await bb.sessions.logs.list(session.id);
  urls.close();
  return { sessionId: session.id, first: urls.first, logs };
}

/** A raw CDP connection to `url`: `send(method, params, sessionId)` resolves with the answer. */
async function rawCdp(url) {
  const { default: WebSocket } = await import("ws");
  const ws = new WebSocket(url);
  await new Promise((ok, no) => {
    ws.once("open", ok);
    ws.once("error", no);
  });
  let n = 0;
  const waiting = new Map();
  ws.on("message", (m) => {
    const v = JSON.parse(m);
    if (v.id && waiting.has(v.id)) {
      waiting.get(v.id)(v);
      waiting.delete(v.id);
    }
  });
  const send = (method, params = {}, sessionId) =>
    new Promise((ok) => {
      const id = ++n;
      waiting.set(id, ok);
      ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    });
  return { ws, send };
}

async function raw(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const session = await bb.sessions.create({ projectId });
  const { ws, send } = await rawCdp(session.connectUrl);
  const { result: { targetId } } = await send("Target.createTarget", { url: "about:blank" });
  const { result: { sessionId } } = await send("Target.attachToTarget", { targetId, flatten: true });
  const page = "data:text/html,<title>raw</title><script>console.log('raw-console-line');" +
    "setTimeout(() => { throw new Error('raw-page-error') }, 0)</script>";
  await send("Page.navigate", { url: page }, sessionId);
  const about = (e, method, text) => e.method === method && JSON.stringify(e.response?.result ?? {}).includes(text);
  await until("the page's console line and error in the log", 20000, async () => {
    const logs = await bb.sessions.logs.list(session.id);
    const both = logs.some((e) => about(e, "Runtime.consoleAPICalled", "raw-console-line")) &&
      logs.some((e) => about(e, "Runtime.exceptionThrown", "raw-page-error"));
    return both ? logs : undefined;
  });
  // A navigation once the page is watched (one in the page's first milliseconds, before the
  // watch has attached, is not logged; its console and errors are, as Chrome replays them).
  const second = "data:text/html,<title>raw-second</title>";
  await send("Page.navigate", { url: second }, sessionId);
  await until("the second navigation in the log", 20000, async () => {
    const logs = await bb.sessions.logs.list(session.id);
    return logs.some((e) => about(e, "Page.frameNavigated", "raw-second")) ? logs : undefined;
  });
  // The renderer crashes: no answer comes.
  send("Page.crash", {}, sessionId);
  await until("the crash in the log", 20000, async () => {
    const logs = await bb.sessions.logs.list(session.id);
    return logs.some((e) => /targetCrashed$/.test(e.method)) ? logs : undefined;
  });
  ws.close();
  await ended(bb, projectId, session.id);
  const logs = await bb.sessions.logs.list(session.id);
  return { sessionId: session.id, page: second, logs };
}

const SCENARIOS = { logged, unlogged, raw };

run(async (args) => {
  const scenario = SCENARIOS[requireArg(args, "scenario")];
  if (!scenario) throw new Error(`unknown scenario: ${args.scenario}`);
  return scenario(args);
}, { defaultTimeoutMs: 120000 });
