// handoff.mjs --url WS --session ID --mint BIN --key-file PEM --chrome PATH --scenario S
// handoff.mjs --url WS --scenario ask [--handoff-timeout S] [--wait]
//
// An agent asks for a person over CDP: Puppeteer on the session (--url, the connect URL with
// its token) sends `Wallcrawler.requestHandoff` on a page's CDPSession; a person, simulated by a
// second headless Chromium (puppeteer-core `launch`, the Debian binary), opens the returned url
// and presses Done. Scenarios:
//   done:    the view-only viewer (credential from `BIN token --viewer view`) shows the banner
//            without a Done button, and its done (button forced visible) changes nothing; the
//            control viewer at the returned url shows the reason and its Done ends the handoff:
//            the CDPSession receives Wallcrawler.handoffCompleted {handoffId, timedOut:false}.
//   timeout: timeout 1: the CDPSession receives handoffCompleted {timedOut:true}; the viewer's
//            banner goes.
//   refused: the exact errors: unknown Wallcrawler.* method, huge reason, bad timeouts, a second
//            request while one is pending; and over a raw socket, a request naming a session
//            Chrome does not have is answered by the proxy (Chrome would have said "Session with
//            given id not found"), an unknown method likewise.
//   ask:     (only --url [--handoff-timeout S] [--wait]) the answer to one request over a raw
//            socket, and with --wait the Wallcrawler.handoffCompleted that ends it:
//            {answer, events}.
// Prints {"ok":true,...}.

import { execFileSync } from "node:child_process";
import { requireArg, run } from "./lib.mjs";

const CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

function mintView(args) {
  const argv = ["token", "--session-id", requireArg(args, "session"), "--viewer", "view", "--ttl", "600"];
  const env = { ...process.env, WALLCRAWLER_JWT_PRIVATE_KEY_FILE: requireArg(args, "key-file") };
  return execFileSync(requireArg(args, "mint"), argv, { env, encoding: "utf8" }).trim();
}

/** Resolves with the params of the next `Wallcrawler.handoffCompleted` on `cdp`. */
function completed(cdp) {
  return new Promise((resolve) => cdp.once("Wallcrawler.handoffCompleted", resolve));
}

/** Opens the viewer at `url`; waits until its banner shows `reason`. */
async function openBanner(viewer, url, reason) {
  const vp = await viewer.newPage();
  await vp.setViewport({ width: 800, height: 600 });
  const answer = await vp.goto(url);
  if (answer.status() !== 200) throw new Error(`/viewer answered ${answer.status()}`);
  await vp.waitForFunction(
    (r) => !document.getElementById("handoff").hidden && document.querySelector("#handoff span").textContent === r,
    { timeout: 10000, polling: 50 },
    reason,
  );
  return vp;
}

async function errorOf(p) {
  try {
    await p;
  } catch (e) {
    return e.message;
  }
  throw new Error("expected an error");
}

/** Sends raw CDP messages on a fresh socket to the connect URL; the answers by id. */
async function raw(url, messages) {
  const { default: WebSocket } = await import("ws");
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => { ws.once("open", resolve); ws.once("error", reject); });
  const answers = new Map();
  const all = new Promise((resolve) => {
    ws.on("message", (data) => {
      const m = JSON.parse(data.toString());
      if (m.id !== undefined) answers.set(m.id, m);
      if (answers.size === messages.length) resolve();
    });
  });
  for (const m of messages) ws.send(JSON.stringify(m));
  await all;
  ws.close();
  return messages.map((m) => answers.get(m.id));
}

const scenarios = {
  async done({ page, viewer, args }) {
    const cdp = await page.createCDPSession();
    const reason = "Please solve the <b>captcha</b>";
    const r = await cdp.send("Wallcrawler.requestHandoff", { reason, timeout: 120 });
    const url = new URL(r.url);
    const viewOnly = new URL(r.url);
    viewOnly.searchParams.set("t", mintView(args));
    // A view-only viewer sees the banner, no Done button; its done (forced) ends nothing.
    const watcher = await openBanner(viewer, viewOnly.toString(), reason);
    const watcherButton = await watcher.$eval("#handoff-done", (b) => b.hidden);
    let early = null;
    cdp.once("Wallcrawler.handoffCompleted", (p) => { early = p; });
    await watcher.evaluate(() => { document.getElementById("handoff-done").hidden = false; });
    await watcher.click("#handoff-done");
    await watcher.evaluate(() => window.viewer.ping());
    const afterViewDone = await watcher.evaluate(() => window.viewer.handoff && window.viewer.handoff.id);
    if (early) throw new Error(`a view-only done completed the handoff: ${JSON.stringify(early)}`);
    // The person at the url (control) presses Done.
    const person = await openBanner(viewer, url.toString(), reason);
    const bannerHtml = await person.$eval("#handoff span", (s) => s.innerHTML);
    const ended = completed(cdp);
    const t0 = Date.now();
    await person.click("#handoff-done");
    const event = await ended;
    const ms = Date.now() - t0;
    // Both banners go.
    for (const vp of [person, watcher]) {
      await vp.waitForFunction(() => document.getElementById("handoff").hidden, { timeout: 10000, polling: 50 });
    }
    return { result: r, url: `${url.origin}${url.pathname}`, watcherButton, afterViewDone, bannerHtml, event, ms };
  },

  async timeout({ page, viewer }) {
    const cdp = await page.createCDPSession();
    const ended = completed(cdp);
    const r = await cdp.send("Wallcrawler.requestHandoff", { reason: "quick", timeout: 1 });
    const vp = await openBanner(viewer, r.url, "quick").catch(() => null);
    const t0 = Date.now();
    const event = await ended;
    const ms = Date.now() - t0;
    if (vp) await vp.waitForFunction(() => document.getElementById("handoff").hidden, { timeout: 10000 });
    return { result: r, event, ms };
  },

  async refused({ page, args }) {
    const cdp = await page.createCDPSession();
    const errors = {
      unknown: await errorOf(cdp.send("Wallcrawler.nope", {})),
      huge: await errorOf(cdp.send("Wallcrawler.requestHandoff", { reason: "x".repeat(100000), timeout: 60 })),
      zero: await errorOf(cdp.send("Wallcrawler.requestHandoff", { reason: "x", timeout: 0 })),
      long: await errorOf(cdp.send("Wallcrawler.requestHandoff", { reason: "x", timeout: 3601 })),
      noReason: await errorOf(cdp.send("Wallcrawler.requestHandoff", { timeout: 60 })),
    };
    const first = await cdp.send("Wallcrawler.requestHandoff", { reason: "one", timeout: 60 });
    errors.second = await errorOf(cdp.send("Wallcrawler.requestHandoff", { reason: "two", timeout: 60 }));
    // A raw socket, naming a CDP session Chrome does not have: Chrome would answer "Session with
    // given id not found"; these answers are the proxy's, so Chrome never saw the commands.
    const url = requireArg(args, "url");
    const rawAnswers = await raw(url, [
      { id: 1, sessionId: "NOT-A-SESSION", method: "Wallcrawler.nope", params: {} },
      { id: 2, sessionId: "NOT-A-SESSION", method: "Wallcrawler.requestHandoff", params: { reason: "r", timeout: 5 } },
      { id: 3, sessionId: "NOT-A-SESSION", method: "Runtime.evaluate", params: { expression: "1" } },
    ]);
    // The page still works: nothing broke on the connection.
    const still = await page.evaluate(() => 6 * 7);
    return { errors, first, rawAnswers, still };
  },
};

run(async (args) => {
  const url = requireArg(args, "url");
  if (args.scenario === "ask") {
    // Only the answer to a request, over a raw socket (no person, no second browser); with
    // --wait, the socket stays open until the handoff ends (its timeout: --handoff-timeout).
    const timeout = Number(args["handoff-timeout"] || 60);
    const { default: WebSocket } = await import("ws");
    const ws = new WebSocket(url);
    await new Promise((resolve, reject) => { ws.once("open", resolve); ws.once("error", reject); });
    const events = [];
    let answered;
    const answer = new Promise((resolve) => { answered = resolve; });
    const ended = new Promise((resolve) => {
      ws.on("message", (data) => {
        const m = JSON.parse(data.toString());
        if (m.id === 1) answered(m);
        if (m.method === "Wallcrawler.handoffCompleted") { events.push(m); resolve(); }
      });
    });
    ws.send(JSON.stringify({ id: 1, method: "Wallcrawler.requestHandoff", params: { reason: "ask", timeout } }));
    const got = await answer;
    if (args.wait) await ended;
    ws.close();
    return { answer: got, events };
  }
  const scenario = scenarios[requireArg(args, "scenario")];
  if (!scenario) throw new Error(`unknown scenario ${args.scenario}`);
  const { default: puppeteer } = await import("puppeteer-core");
  const session = await puppeteer.connect({ browserWSEndpoint: url, protocolTimeout: 20000 });
  const viewer = await puppeteer.launch({
    executablePath: requireArg(args, "chrome"),
    headless: true,
    args: CHROME_ARGS,
  });
  try {
    const page = await session.newPage();
    await page.setViewport({ width: 800, height: 600 });
    await page.goto("data:text/html,<title>handoff</title><body style='background:rgb(0,0,255)'>");
    return await scenario({ page, session, viewer, args });
  } finally {
    await viewer.close();
    session.disconnect();
  }
});
