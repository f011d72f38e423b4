// dashboard.mjs --base <baseURL> --key <apiKey> --project <projectId> --scenario <name>
//               [--chrome <path>]   (else CHROME_PATH, else /usr/bin/chromium)
//
//   person:  below.
//   hostile: a session whose metadata's keys and values are markup, listed and opened.
//   direct:  (serve in direct mode) the live view, not framable, offered as a link.
//
// The dashboard (GET /dashboard) as a person uses it, in a headless Chromium (playwright-core,
// the Debian binary): the stock SDK creates a session whose userMetadata holds markup,
// Puppeteer drives it to a page served on 127.0.0.1; the person opens /dashboard, pastes the
// API key, finds the session listed (the markup shown as text), filters the list, opens the
// session: its live view (the viewer framed from the gateway), its log followed live (the
// first Page.navigate, then a second one as it happens), its recording and downloads. Then the
// session is released, and opened again once ended: its log read whole, its recording's state.
// Every request the page makes, its console and its storage are watched for the key.
// Prints {"ok":true,...} for the Rust test to judge.
import { requireArg, run, serveTwoPages, until } from "./lib.mjs";

const CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

const HOSTILE = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>`;
const HOSTILE_KEY = `<b onmouseover="window.__pwned=3">k</b>`;
const WAIT = 20000;

const pages = () => serveTwoPages((path) => `<title>${path}</title><body style="background:rgb(255,0,0)"><h1>${path}</h1>`);

/**
 * The panel's `data-state` once it has left `loading` and `waiting` (a running session's
 * recording with no page stored yet), and `pending` unless `pendingToo`.
 */
async function settled(page, id, ms, pendingToo = false) {
  const box = page.locator(`#${id}`);
  return until(`#${id} settling`, ms, async () => {
    const s = await box.getAttribute("data-state");
    const unsettled = ["loading", "waiting", ...(pendingToo ? [] : ["pending"])];
    return s && !unsettled.includes(s) ? s : undefined;
  });
}

/**
 * What a person sees of the recording once it settles (and a video's readiness, if any); while
 * the session runs (`running`), a video still being made counts as settled.
 */
async function recordingSeen(page, running = false) {
  const state = await settled(page, "recording", 60000, running);
  const seen = { state, text: await page.locator("#recording").innerText() };
  if (state === "ready") {
    seen.videoReadyState = await until("a video's metadata", WAIT, async () => {
      const r = await page.locator("#recording video").first().evaluate((v) => v.readyState);
      return r >= 1 ? r : undefined;
    });
  }
  return seen;
}

async function person(args) {
  const base = requireArg(args, "base");
  const key = requireArg(args, "key");
  const projectId = requireArg(args, "project");
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  const bb = new Browserbase({ apiKey: key, baseURL: base, maxRetries: 0, timeout: 60000 });
  const urls = await pages();
  const session = await bb.sessions.create({ projectId, userMetadata: { note: HOSTILE, run: "dashboard-e2e" } });
  const puppeteer = (await import("puppeteer-core")).default;
  const driven = await puppeteer.connect({ browserWSEndpoint: session.connectUrl });
  const tab = (await driven.pages())[0] ?? (await driven.newPage());
  await tab.goto(urls.first);

  const { chromium } = await import("playwright-core");
  const browser = await chromium.launch({
    executablePath: args.chrome || process.env.CHROME_PATH || "/usr/bin/chromium",
    headless: true,
    args: CHROME_ARGS,
  });
  const out = { sessionId: session.id, first: urls.first, second: urls.second };
  try {
    const page = await browser.newPage();
    const requests = [];
    const consoleTexts = [];
    page.on("request", (r) => requests.push({ url: r.url(), headers: r.headers() }));
    page.on("console", (m) => consoleTexts.push(m.text()));
    page.on("pageerror", (e) => consoleTexts.push(`pageerror: ${e.message}`));
    // Content-Security-Policy refusals, as the page itself sees them.
    await page.addInitScript(() => {
      window.__violations = [];
      document.addEventListener("securitypolicyviolation", (e) =>
        window.__violations.push(`${e.effectiveDirective} ${e.blockedURI}`));
    });

    const res = await page.goto(`${base}/dashboard`);
    const h = res.headers();
    out.headers = {
      status: res.status(),
      csp: h["content-security-policy"] ?? null,
      cacheControl: h["cache-control"] ?? null,
      xFrameOptions: h["x-frame-options"] ?? null,
      contentType: h["content-type"] ?? null,
    };

    // Paste the key, open.
    await page.fill("#key", key);
    await page.click("#use-key");
    const row = page.locator(`#sessions tbody tr[data-id="${session.id}"]`);
    await row.waitFor({ timeout: WAIT });
    out.listed = true;
    out.listedStatus = await row.locator("td.status").innerText();
    out.hostile = {
      text: await row.locator("td.metadata").innerText(),
      imgs: await page.locator("#sessions img, #sessions script").count(),
      pwned: await page.evaluate(() => window.__pwned ?? null),
    };

    // The filters: by text (client side) and by status (the API's).
    await page.fill("#text-filter", "no-such-session-anywhere");
    out.hiddenByText = (await row.count()) === 0;
    await page.fill("#text-filter", "dashboard-e2e");
    out.shownByText = (await row.count()) === 1;
    await page.fill("#text-filter", "");
    await page.selectOption("#status-filter", "COMPLETED");
    await until("the COMPLETED list", WAIT, async () => ((await row.count()) === 0 ? true : undefined));
    out.hiddenByStatus = true;
    await page.selectOption("#status-filter", "RUNNING");
    await row.waitFor({ timeout: WAIT });
    out.shownByStatus = true;

    // Open it: the log streams the first navigation; a second one arrives while watching.
    await row.locator("button.open").click();
    const navigation = (url) => page.locator(`#logs li[data-method="Page.navigate"]`, { hasText: url });
    await navigation(urls.first).waitFor({ timeout: WAIT });
    out.firstNavigationShown = true;
    out.logsSource = await page.locator("#logs").getAttribute("data-source");
    await tab.goto(urls.second);
    await navigation(urls.second).waitFor({ timeout: WAIT });
    out.secondNavigationStreamed = true;
    out.detailMetadata = await page.locator('#detail-fields [data-field="userMetadata"]').innerText();

    // The live view: the viewer, framed from the gateway's origin, draws its canvas.
    const live = await settled(page, "live", WAIT);
    const src = await page.locator("#live iframe").getAttribute("src");
    await page.frameLocator("#live iframe").locator("canvas#screen").waitFor({ timeout: WAIT });
    out.live = { state: live, origin: src ? new URL(src).origin : null, canvas: true };
    out.downloads = { state: await settled(page, "downloads", WAIT), text: await page.locator("#downloads").innerText() };
    out.recordingWhileRunning = await recordingSeen(page, true);

    // Released: the stream says so; opened again, the whole log is read at once.
    await driven.disconnect();
    await bb.sessions.update(session.id, { status: "REQUEST_RELEASE", projectId });
    await until("the stream's end in the page", 60000, async () =>
      (await page.locator("#logs-state").innerText()).startsWith("The session ended") ? true : undefined);
    const status = page.locator('#detail-fields [data-field="status"]');
    out.endedStatusShown = await until("the ended status shown", WAIT, async () => {
      const s = await status.innerText();
      return s !== "RUNNING" ? s : undefined;
    });
    await page.click("#back");
    await page.selectOption("#status-filter", "");
    await row.waitFor({ timeout: WAIT });
    await row.locator("button.open").click();
    await navigation(urls.second).waitFor({ timeout: WAIT });
    out.endedLogsSource = await page.locator("#logs").getAttribute("data-source");
    out.endedNavigations = await page.locator(`#logs li[data-method="Page.navigate"] .summary`).allInnerTexts();
    out.endedLive = await settled(page, "live", WAIT);
    out.recordingEnded = await recordingSeen(page);

    // Nothing of the key anywhere but the header of the API's own requests.
    const apiOrigin = new URL(base).origin;
    const apiCalls = requests.filter((r) => r.url.startsWith(`${apiOrigin}/v1/`));
    out.apiCalls = apiCalls.length;
    out.apiCallsWithKey = apiCalls.filter((r) => r.headers["x-bb-api-key"] === key).length;
    out.urlsWithKey = requests.filter((r) => r.url.includes(key)).map((r) => r.url);
    out.otherOrigins = [...new Set(requests.map((r) => new URL(r.url).origin))].filter((o) => o !== apiOrigin);
    out.consoleWithKey = consoleTexts.filter((t) => t.includes(key));
    out.violations = await page.evaluate(() => window.__violations);
    out.storage = await page.evaluate((k) => ({
      local: localStorage.length,
      cookie: document.cookie,
      sessionHasKey: Object.keys(sessionStorage).some((n) => sessionStorage.getItem(n) === k),
    }), key);
    await page.click("#forget");
    out.forgotten = await page.evaluate((k) =>
      !Object.keys(sessionStorage).some((n) => sessionStorage.getItem(n) === k), key);
    out.console = consoleTexts;
  } finally {
    await browser.close();
    urls.close();
  }
  return out;
}

/**
 * A session created with `create` (the stock SDK), and a person's dashboard in a headless
 * Chromium showing it listed: `look(page, row, session)` reads what the scenario judges; the
 * browser closed and the session released after.
 */
async function withListed(args, create, look) {
  const base = requireArg(args, "base");
  const key = requireArg(args, "key");
  const projectId = requireArg(args, "project");
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  const bb = new Browserbase({ apiKey: key, baseURL: base, maxRetries: 0, timeout: 60000 });
  const session = await bb.sessions.create({ projectId, ...create });
  const { chromium } = await import("playwright-core");
  const browser = await chromium.launch({
    executablePath: args.chrome || process.env.CHROME_PATH || "/usr/bin/chromium",
    headless: true,
    args: CHROME_ARGS,
  });
  try {
    const page = await browser.newPage();
    await page.goto(`${base}/dashboard`);
    await page.fill("#key", key);
    await page.click("#use-key");
    const row = page.locator(`#sessions tbody tr[data-id="${session.id}"]`);
    await row.waitFor({ timeout: WAIT });
    return await look(page, row, session);
  } finally {
    await browser.close();
    await bb.sessions.update(session.id, { status: "REQUEST_RELEASE", projectId });
  }
}

/** The list and the session's fields with markup in the metadata's keys and values. */
async function hostile(args) {
  const userMetadata = { note: HOSTILE, [HOSTILE_KEY]: "x" };
  return withListed(args, { userMetadata }, async (page, row, session) => {
    const listText = await row.locator("td.metadata").innerText();
    const listElements = await row.locator("td.metadata *").count();
    await row.locator("button.open").click();
    const field = page.locator('#detail-fields [data-field="userMetadata"]');
    await field.waitFor({ timeout: WAIT });
    return {
      sessionId: session.id,
      sent: userMetadata,
      listText,
      listElements,
      detailText: await field.innerText(),
      detailElements: await field.locator("*").count(),
      imgsOrScripts: await page.locator("#main img, #main script, #main b").count(),
      pwned: await page.evaluate(() => window.__pwned ?? null),
    };
  });
}

/** Direct mode: the viewer is on the session's own port, which the page may not frame. */
async function direct(args) {
  return withListed(args, {}, async (page, row, session) => {
    await row.locator("button.open").click();
    const live = await settled(page, "live", WAIT);
    const state = await until("the frame refused", WAIT, async () => {
      const s = await page.locator("#live").getAttribute("data-state");
      return s !== "live" ? s : undefined;
    });
    const href = await page.locator("#live a").getAttribute("href");
    return {
      sessionId: session.id,
      connectUrl: session.connectUrl,
      first: live,
      state,
      frames: await page.locator("#live iframe").count(),
      text: await page.locator("#live").innerText(),
      linkOrigin: href ? new URL(href).origin : null,
      linkPath: href ? new URL(href).pathname : null,
    };
  });
}

const SCENARIOS = { person, hostile, direct };

run(async (args) => {
  const scenario = SCENARIOS[requireArg(args, "scenario")];
  if (!scenario) throw new Error(`unknown scenario: ${args.scenario}`);
  return scenario(args);
}, { defaultTimeoutMs: 180000 });
