// drive.mjs --client <puppeteer|playwright|cri|stagehand|ws> --url <endpoint> [--bearer <token>] [--timeout-ms N]
//
// Connects with a real CDP client, opens a page on a data: URL (no network),
// evaluates 1+1, takes a screenshot, closes the page it opened and
// disconnects WITHOUT closing the browser.
// Prints {"ok":true,"client":"...","eval":2,"screenshotBytes":N,...}.

import { DATA_URL, bearerHeaders, requireArg, run } from "./lib.mjs";
import { cdpSession } from "./rawcdp.mjs";

const isHttp = (url) => /^https?:/i.test(url);

// What every client does with its page (puppeteer's and playwright's Page agree on these):
// load the test page, evaluate 1 + 1, take a screenshot, close the page.
async function exercise(page, browserVersion) {
  await page.goto(DATA_URL);
  const evalResult = await page.evaluate(() => 1 + 1);
  const shot = await page.screenshot({ type: "png" });
  await page.close();
  return { eval: evalResult, screenshotBytes: shot.length, browserVersion };
}

async function withPuppeteer(url, headers) {
  const { default: puppeteer } = await import("puppeteer-core");
  // Real puppeteer behaviour for http URLs: browserURL fetches
  // new URL('/json/version', url), which DROPS the query string and sends no
  // headers. Only the ws:// form can carry auth.
  const opts = { headers, defaultViewport: { width: 800, height: 600 }, protocolTimeout: 20000 };
  if (isHttp(url)) opts.browserURL = url;
  else opts.browserWSEndpoint = url;
  const browser = await puppeteer.connect(opts);
  try {
    const browserVersion = await browser.version();
    return await exercise(await browser.newPage(), browserVersion);
  } finally {
    await browser.disconnect();
  }
}

async function withPlaywright(url, headers) {
  const { chromium } = await import("playwright-core");
  // ws:// or http(s):// both work; for http Playwright fetches
  // <url>/json/version/ keeping the query and sending the headers.
  const browser = await chromium.connectOverCDP(url, { headers, timeout: 20000 });
  try {
    const browserVersion = browser.version();
    // Use the default context (as Browserbase-style clients do) and close
    // only the page we made.
    const context = browser.contexts()[0] ?? (await browser.newContext());
    return await exercise(await context.newPage(), browserVersion);
  } finally {
    // On a connectOverCDP browser, close() only disconnects.
    await browser.close();
  }
}

async function withCri(url, headers) {
  if (headers) {
    throw new Error("chrome-remote-interface cannot send HTTP headers on its WebSocket; use the ?signingKey= form (or --client ws)");
  }
  if (isHttp(url)) {
    throw new Error("chrome-remote-interface needs the ws:// URL (its HTTP discovery drops the query string)");
  }
  const { default: CDP } = await import("chrome-remote-interface");
  // local:true uses CRI's bundled protocol descriptor; otherwise CRI fetches
  // http://host:port/json/protocol WITHOUT the query string (unauthenticated).
  const client = await CDP({ target: url, local: true });
  try {
    const { product: browserVersion } = await client.Browser.getVersion();
    const { targetId } = await client.Target.createTarget({ url: "about:blank" });
    const { sessionId } = await client.Target.attachToTarget({ targetId, flatten: true });
    try {
      await client.Page.enable(sessionId);
      const loaded = new Promise((resolve) => client.once(`Page.loadEventFired.${sessionId}`, resolve));
      await client.Page.navigate({ url: DATA_URL }, sessionId);
      await loaded;
      const { result, exceptionDetails } = await client.Runtime.evaluate(
        { expression: "1+1", returnByValue: true },
        sessionId,
      );
      if (exceptionDetails) throw new Error(`evaluate threw: ${JSON.stringify(exceptionDetails)}`);
      const { data } = await client.Page.captureScreenshot({ format: "png" }, sessionId);
      return { eval: result.value, screenshotBytes: Buffer.from(data, "base64").length, browserVersion };
    } finally {
      await client.Target.closeTarget({ targetId });
    }
  } finally {
    await client.close();
  }
}

async function withStagehand(url, headers) {
  const { Stagehand } = await import("@browserbasehq/stagehand");
  const stagehand = new Stagehand({
    env: "LOCAL",
    localBrowserLaunchOptions: { cdpUrl: url, cdpHeaders: headers, connectTimeoutMs: 20000 },
    verbose: 0,
    disablePino: true,
    logger: (line) => console.error(JSON.stringify(line)),
  });
  await stagehand.init();
  try {
    const page = await stagehand.context.newPage();
    await page.goto(DATA_URL);
    const evalResult = await page.evaluate(() => 1 + 1);
    const shot = await page.screenshot({ type: "png" });
    await page.close();
    return { eval: evalResult, screenshotBytes: shot.length };
  } finally {
    // With cdpUrl, close() only closes the CDP WebSocket: Stagehand's
    // "kill" for an attached browser is a no-op stub.
    await stagehand.close();
  }
}

async function withRawWs(url, headers) {
  const s = await cdpSession(url, headers);
  try {
    const { product: browserVersion } = await s.send("Browser.getVersion");
    const { targetId } = await s.send("Target.createTarget", { url: "about:blank" });
    const { sessionId } = await s.send("Target.attachToTarget", { targetId, flatten: true });
    try {
      await s.send("Page.enable", {}, sessionId);
      const loaded = s.waitFor("Page.loadEventFired", sessionId);
      await s.send("Page.navigate", { url: DATA_URL }, sessionId);
      await loaded;
      const { result } = await s.send("Runtime.evaluate", { expression: "1+1", returnByValue: true }, sessionId);
      const { data } = await s.send("Page.captureScreenshot", { format: "png" }, sessionId);
      return { eval: result.value, screenshotBytes: Buffer.from(data, "base64").length, browserVersion };
    } finally {
      await s.send("Target.closeTarget", { targetId });
    }
  } finally {
    await s.close();
  }
}

const CLIENTS = {
  puppeteer: withPuppeteer,
  playwright: withPlaywright,
  cri: withCri,
  stagehand: withStagehand,
  ws: withRawWs,
};

run(async (args) => {
  const client = requireArg(args, "client");
  const url = requireArg(args, "url");
  const headers = bearerHeaders(args);
  const fn = CLIENTS[client];
  if (!fn) throw new Error(`unknown --client ${client} (want one of ${Object.keys(CLIENTS).join(", ")})`);
  const started = Date.now();
  const r = await fn(url, headers);
  if (r.eval !== 2) throw new Error(`1+1 evaluated to ${JSON.stringify(r.eval)}`);
  if (!(r.screenshotBytes > 0)) throw new Error("empty screenshot");
  return { client, eval: r.eval, screenshotBytes: r.screenshotBytes, browserVersion: r.browserVersion, elapsedMs: Date.now() - started };
});
