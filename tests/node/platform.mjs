// platform.mjs --base <baseURL> --key <apiKey> --project <projectId> --scenario <name>
//
// Drives the local platform the way users do: the stock Browserbase SDK pointed at our API
// (baseURL + API key, sent as X-BB-API-Key), and real clients on the connectUrl it returns.
//   persist:   context → session (persist) → playwright sets a cookie → release → COMPLETED →
//              a new session on the same context sees the cookie.
//   stagehand: Stagehand 3.7.3 (env LOCAL, cdpUrl) drives a session created through the API;
//              then the SDK's `sessions.debug()` (and with `expiresIn` and `mode: "view"`) is
//              checked against its SessionLiveURLs type, every URL filled.
//   stagehand-browserbase: Stagehand 3.7.3 with env BROWSERBASE and disableAPI creates its own
//              session through the SDK (BROWSERBASE_BASE_URL must point at the platform), drives
//              it and closes without releasing it; prints the session id.
//   busy:      a second persisting session on a context whose first session is still running
//              gets 409; once the first is released it succeeds.
//   no-retry:  with the SDK's own retry policy (2 retries of 408/409/429/5xx), counts the
//              requests a failed create, the 501 endpoints and a refused downloads cost
//              (run against a platform whose controller cannot start).
//   edges:     with the stock retry policy and counted requests: lists by metadata query (`q`,
//              alone and with `status`), a malformed `q`, `debug` of a released session (409),
//              a malformed id and a create with userMetadata over 512 characters; each refusal
//              must cost one request (run against sessions the test wrote, no controller).
//   paging:    lists the project's sessions a page at a time with the SDK's paging query
//              parameters (`limit`, `cursor`; the next cursor comes in the `x-next-cursor`
//              header, read through `withResponse()`); a tampered cursor gets a 400.
//   extensions: the SDK's own `extensions.create({ file })` (multipart) of the zip named by
//              EXTENSION_ZIP, `retrieve`, a session created with its id, one with an unknown id
//              (refused), the release, `delete`, and a `retrieve` after it (404).
//   extension-mark: the SDK uploads EXTENSION_ZIP (a content script marking the page), creates a
//              session with it and one without; Puppeteer opens a page served on 127.0.0.1 in
//              each and reads the mark; leaves both running and the extension kept.
//   stagehand4: Stagehand 4.4.0's `browserbase.launch({ apiKey, baseUrl })` (it uploads its own
//              extension and creates the session with it), a page served on 127.0.0.1, `1+1`
//              and a value from the page, `close()` (release + extension delete); prints the
//              session id.
// Prints {"ok":true,...} with what it observed.

import { markOn, requireArg, run, servePage } from "./lib.mjs";

const ORIGIN = "http://app.example.test/";

async function client(args) {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  // No retries: a 409/429 must surface, not be retried away.
  return new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
}

async function waitFor(bb, id, pred, what) {
  const deadline = Date.now() + 40000;
  for (;;) {
    const s = await bb.sessions.retrieve(id);
    if (pred(s)) return s;
    if (Date.now() > deadline) throw new Error(`session ${id} never became ${what}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function withPlaywright(connectUrl, fn) {
  const { chromium } = await import("playwright-core");
  const browser = await chromium.connectOverCDP(connectUrl, { timeout: 20000 });
  try {
    const context = browser.contexts()[0];
    const page = await context.newPage();
    await page.route("**/*", (route) => route.fulfill({ status: 200, contentType: "text/html", body: "<title>app</title>" }));
    await page.goto(ORIGIN);
    const r = await fn(context, page);
    await page.close();
    return r;
  } finally {
    await browser.close(); // only disconnects a connectOverCDP browser
  }
}

async function persist(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const ctx = await bb.contexts.create({ projectId });
  const first = await bb.sessions.create({
    projectId,
    browserSettings: { context: { id: ctx.id, persist: true }, viewport: { width: 1024, height: 768 } },
  });
  if (first.status !== "RUNNING" || !first.connectUrl) throw new Error(`first session not running: ${JSON.stringify(first)}`);
  const far = Math.floor(Date.now() / 1000) + 30 * 86400;
  await withPlaywright(first.connectUrl, (context) =>
    context.addCookies([{ name: "pw", value: "from-first-session", url: ORIGIN, expires: far }]),
  );
  const released = await bb.sessions.update(first.id, { status: "REQUEST_RELEASE", projectId });
  const ended = await waitFor(bb, first.id, (s) => s.status === "COMPLETED" && s.endedAt, "COMPLETED with endedAt");
  const second = await bb.sessions.create({ projectId, browserSettings: { context: { id: ctx.id, persist: false } } });
  const cookies = await withPlaywright(second.connectUrl, (context) => context.cookies(ORIGIN));
  await bb.sessions.update(second.id, { status: "REQUEST_RELEASE", projectId });
  const list = await bb.sessions.list();
  return {
    contextId: ctx.id,
    firstStatusAfterRelease: released.status,
    firstEnded: ended.status,
    firstProxyBytes: ended.proxyBytes,
    secondCookies: Object.fromEntries(cookies.map((c) => [c.name, c.value])),
    listed: list.length,
  };
}

async function stagehand(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const session = await bb.sessions.create({ projectId });
  const { Stagehand } = await import("@browserbasehq/stagehand");
  const sh = new Stagehand({ env: "LOCAL", verbose: 0, localBrowserLaunchOptions: { cdpUrl: session.connectUrl } });
  await sh.init();
  const page = sh.context.pages()[0] ?? (await sh.context.newPage());
  await page.goto("data:text/html,<title>stagehand</title><h1>hi</h1>");
  const value = await page.evaluate(() => 1 + 1);
  const title = await page.title();
  await sh.close();
  const debug = await bb.sessions.debug(session.id);
  // The SDK's own `expiresIn` query, and our `mode` beside it (sent as an extra query value).
  const viewOnly = await bb.sessions.debug(session.id, { expiresIn: 60, mode: "view" });
  await bb.sessions.update(session.id, { status: "REQUEST_RELEASE", projectId });
  return {
    eval: value,
    title,
    debugPages: debug.pages.length,
    debugWsUrl: debug.wsUrl === session.connectUrl,
    debugShape: [...liveUrlsProblems(debug), ...liveUrlsProblems(viewOnly)],
    debugOnConnectHost: viewerOrigin(debug.debuggerFullscreenUrl) === viewerOrigin(session.connectUrl),
    viewOnlyClaims: claimsOf(viewOnly.debuggerFullscreenUrl),
  };
}

/// The origin a viewer URL (or, mapped to http(s), a ws(s) connectUrl) is on.
function viewerOrigin(url) {
  const u = new URL(url.replace(/^ws/, "http"));
  return u.origin;
}

/// The claims of the credential in a viewer URL's `t` (the payload, not checked here).
function claimsOf(url) {
  const t = new URL(url).searchParams.get("t");
  const payload = JSON.parse(Buffer.from(t.split(".")[1], "base64url").toString());
  return { aud: payload.aud, mode: payload.mode, ttl: payload.exp - payload.iat, page: payload.page ?? null };
}

/// What in `d` is not the SDK's `SessionLiveURLs` filled (every URL a non-empty string, each
/// page with its six members), as a list of problems (empty: the shape holds).
function liveUrlsProblems(d) {
  const problems = [];
  const str = (v, what) => {
    if (typeof v !== "string" || v === "") problems.push(`${what} is ${JSON.stringify(v)}`);
  };
  for (const k of ["debuggerFullscreenUrl", "debuggerUrl", "wsUrl"]) str(d[k], k);
  if (!Array.isArray(d.pages) || d.pages.length === 0) problems.push("no pages");
  for (const [i, p] of (d.pages ?? []).entries()) {
    for (const k of ["id", "debuggerFullscreenUrl", "debuggerUrl", "url"]) str(p[k], `pages[${i}].${k}`);
    for (const k of ["title", "faviconUrl"]) {
      if (typeof p[k] !== "string") problems.push(`pages[${i}].${k} is ${JSON.stringify(p[k])}`);
    }
    if (!String(p.debuggerFullscreenUrl).endsWith(`&page=${p.id}&fullscreen=1`)) {
      problems.push(`pages[${i}].debuggerFullscreenUrl is not the page's: ${p.debuggerFullscreenUrl}`);
    }
  }
  return problems;
}

async function stagehandBrowserbase(args) {
  // Stagehand builds its own SDK client from the environment: without this it would call
  // api.browserbase.com.
  const base = requireArg(args, "base");
  if (process.env.BROWSERBASE_BASE_URL !== base) {
    throw new Error(`run with BROWSERBASE_BASE_URL=${base} (got ${process.env.BROWSERBASE_BASE_URL})`);
  }
  const { Stagehand } = await import("@browserbasehq/stagehand");
  const sh = new Stagehand({
    env: "BROWSERBASE",
    apiKey: requireArg(args, "key"),
    projectId: requireArg(args, "project"),
    // No Stagehand API (its sessions and LLM calls go to Browserbase's servers): Stagehand
    // creates the session through the SDK and drives the browser itself.
    disableAPI: true,
    verbose: 0,
    disablePino: true,
  });
  await sh.init();
  const sessionId = sh.browserbaseSessionID;
  const page = sh.context.pages()[0] ?? (await sh.context.newPage());
  await page.goto("data:text/html,<title>stagehand</title><h1>hi</h1>");
  const value = await page.evaluate(() => 1 + 1);
  const title = await page.title();
  // Closes the CDP socket only: with disableAPI Stagehand never releases the session.
  await sh.close();
  return { sessionId, eval: value, title };
}

// The SDK with its stock retry policy (maxRetries defaults to 2: only the answers'
// x-should-retry stops it) and a fetch that counts requests; `attempt(call)` answers the call's
// status and how many requests it cost.
async function countingClient(args) {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  const sent = [];
  const counting = (url, init) => {
    sent.push(`${init?.method ?? "GET"} ${new URL(url).pathname}`);
    return fetch(url, init);
  };
  const bb = new Browserbase({
    apiKey: requireArg(args, "key"),
    baseURL: requireArg(args, "base"),
    fetch: counting,
    timeout: 60000,
  });
  const attempt = async (call) => {
    const before = sent.length;
    let status = "succeeded";
    let message;
    try {
      await call();
    } catch (e) {
      status = e.status ?? `no status: ${e.message}`;
      message = e.error?.message;
    }
    return { status, requests: sent.length - before, message };
  };
  return { bb, attempt, sent };
}

async function noRetry(args) {
  const { bb, attempt, sent } = await countingClient(args);
  const projectId = requireArg(args, "project");
  const id = "sess_does_not_matter";
  return {
    create: await attempt(() => bb.sessions.create({ projectId })),
    logs: await attempt(() => bb.sessions.logs.list(id)),
    recording: await attempt(() => bb.sessions.recording.retrieve(id)),
    downloads: await attempt(() => bb.sessions.downloads.list(id)),
    sent,
  };
}

// The session the Rust test writes released (STOPPED) before running `edges`.
const RELEASED = "sess_edges_released";

async function edges(args) {
  const { bb, attempt, sent } = await countingClient(args);
  const listed = async (q) => (await bb.sessions.list({ q })).map((s) => s.id).sort();
  return {
    shipped: await listed("user_metadata['order']['status']:'shipped'"),
    shippedCompleted: (
      await bb.sessions.list({ q: "user_metadata['order']['status']:'shipped'", status: "COMPLETED" })
    ).map((s) => s.id),
    staging: await listed("user_metadata['env']:'staging'"),
    lost: await listed("user_metadata['order']['status']:'lost'"),
    badQuery: await attempt(() => bb.sessions.list({ q: "order.status=shipped" })),
    debugReleased: await attempt(() => bb.sessions.debug(RELEASED)),
    malformedId: await attempt(() => bb.sessions.retrieve("sess.1")),
    bigMetadata: await attempt(() =>
      bb.sessions.create({ projectId: requireArg(args, "project"), userMetadata: { k: "v".repeat(505) } }),
    ),
    sent,
  };
}

async function busy(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const ctx = await bb.contexts.create({ projectId });
  const settings = { context: { id: ctx.id, persist: true } };
  const first = await bb.sessions.create({ projectId, browserSettings: settings });
  let conflict;
  try {
    await bb.sessions.create({ projectId, browserSettings: settings });
    conflict = { status: "created" };
  } catch (e) {
    conflict = { status: e.status, message: e.error?.message ?? e.message };
  }
  await bb.sessions.update(first.id, { status: "REQUEST_RELEASE", projectId });
  // The release lands; the next create waits for the first session's endedAt (the archive is
  // final then) and succeeds.
  const second = await bb.sessions.create({ projectId, browserSettings: settings });
  const firstAfter = await bb.sessions.retrieve(first.id);
  await bb.sessions.update(second.id, { status: "REQUEST_RELEASE", projectId });
  return { conflict, secondStatus: second.status, firstEndedBeforeSecond: Boolean(firstAfter.endedAt) };
}

async function paging(args) {
  const bb = await client(args);
  const ids = [];
  const pages = [];
  let cursor;
  let first;
  for (;;) {
    const query = cursor ? { limit: 2, cursor } : { limit: 2 };
    const { data, response } = await bb.sessions.list(query).withResponse();
    pages.push(data.length);
    ids.push(...data.map((s) => s.id));
    cursor = response.headers.get("x-next-cursor");
    first ??= cursor;
    if (!cursor) break;
    if (pages.length > 50) throw new Error(`the pages never end: ${JSON.stringify(pages)}`);
  }
  // One character of the payload changed: the project or position it names would differ.
  const tampered = (first[0] === "e" ? "f" : "e") + first.slice(1);
  let refused;
  try {
    await bb.sessions.list({ limit: 2, cursor: tampered });
    refused = { status: "listed" };
  } catch (e) {
    refused = { status: e.status, message: e.error?.message ?? e.message };
  }
  return { ids, pages, refused };
}

async function extensions(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const fs = await import("node:fs");
  const status = async (f) => {
    try {
      await f();
      return { status: "accepted" };
    } catch (e) {
      return { status: e.status, message: e.error?.message ?? e.message };
    }
  };
  const ext = await bb.extensions.create({ file: fs.createReadStream(process.env.EXTENSION_ZIP) });
  const got = await bb.extensions.retrieve(ext.id);
  const session = await bb.sessions.create({ projectId, extensionId: ext.id });
  const unknown = await status(() => bb.sessions.create({ projectId, extensionId: "ext_unknown" }));
  await bb.sessions.update(session.id, { status: "REQUEST_RELEASE", projectId });
  await bb.extensions.delete(ext.id);
  const after = await status(() => bb.extensions.retrieve(ext.id));
  return { ext, got, session: { id: session.id, status: session.status }, unknown, after };
}

async function extensionMark(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const fs = await import("node:fs");
  const page = await servePage();
  try {
    const ext = await bb.extensions.create({ file: fs.createReadStream(process.env.EXTENSION_ZIP) });
    const t0 = Date.now();
    const withExt = await bb.sessions.create({ projectId, extensionId: ext.id });
    const createMs = Date.now() - t0;
    const marked = await markOn(withExt.connectUrl, page.url);
    const plain = await bb.sessions.create({ projectId });
    const unmarked = await markOn(plain.connectUrl, page.url);
    // Both sessions left running and the extension kept: the test looks at them, then ends them.
    return { extId: ext.id, withExt: withExt.id, plain: plain.id, createMs, marked, unmarked };
  } finally {
    page.close();
  }
}

async function stagehand4(args) {
  // Stagehand 4 wants Node >= 22.18, whose global WebSocket it uses; on Node 20 the `ws`
  // package's (the same API) stands in.
  if (globalThis.WebSocket === undefined) globalThis.WebSocket = (await import("ws")).WebSocket;
  const { Stagehand, browserbase } = await import("stagehand4");
  const page = await servePage();
  try {
    const t0 = Date.now();
    const browser = await browserbase.launch({ apiKey: requireArg(args, "key"), baseUrl: requireArg(args, "base") });
    const launchMs = Date.now() - t0;
    const sessionId = browser.sessionId;
    // No model: only the browser is driven (no act/extract/observe).
    const sh = await Stagehand.create({ browser });
    const p = await browser.context.newPage(page.url);
    const value = await p.evaluate("1 + 1");
    const fromPage = await p.evaluate(() => window.fromPage);
    const title = await p.title();
    // Releases the session and deletes the extension Stagehand uploaded.
    await sh.close();
    await browser.close();
    return { sessionId, launchMs, eval: value, fromPage, title };
  } finally {
    page.close();
  }
}

run(async (args) => {
  const scenario = requireArg(args, "scenario");
  if (scenario === "persist") return persist(args);
  if (scenario === "stagehand") return stagehand(args);
  if (scenario === "stagehand-browserbase") return stagehandBrowserbase(args);
  if (scenario === "no-retry") return noRetry(args);
  if (scenario === "busy") return busy(args);
  if (scenario === "paging") return paging(args);
  if (scenario === "edges") return edges(args);
  if (scenario === "extensions") return extensions(args);
  if (scenario === "extension-mark") return extensionMark(args);
  if (scenario === "stagehand4") return stagehand4(args);
  throw new Error(`unknown --scenario ${scenario}`);
}, { defaultTimeoutMs: 120000 });
