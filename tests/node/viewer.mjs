// viewer.mjs --url WS --session ID --mint BIN --key-file PEM --chrome PATH --scenario S
//            [--metrics URL]
//
// The live viewer seen by a person: a second headless Chromium (puppeteer-core `launch`, the
// Debian binary) opens the controller's /viewer page; Puppeteer on the session (--url, the
// connect URL with its token) drives the watched page. Viewer credentials (per page and mode)
// come from `BIN token --viewer MODE --page ID` signed with --key-file. Scenarios:
//   show:    the watched page is red: a screenshot of the viewer shows red; it navigates to
//            green: the viewer follows (time to the first green frame reported).
//   control: a click and typed text on the viewer's canvas reach the watched page's input.
//   view:    the same with mode=view reach nothing (a control viewer's input after a ping
//            barrier is all the page records).
//   five:    five viewers of one page; the page turns green and every viewer draws it (frames
//            drawn since all five opened reported); --metrics's
//            wallcrawler_viewer_screencasts_started_total.
//   tabs:    a red and a green page; the viewer (no page=, not fullscreen) lists both in its
//            tab strip; clicking each tab shows it and brings its page to the front.
//   sdk:     as a person opens the live view of a platform session (--url its wss:// connect
//            URL, --base/--key the API, --ca the local authority's PEM): the Browserbase SDK's
//            sessions.debug() names the red page's debuggerFullscreenUrl (https://, on the
//            gateway); the viewer Chromium trusts the authority as a person's browser does, from
//            an NSS db (certutil) in its HOME, and shows red, then follows green; a Chromium
//            without the authority in its NSS db is refused the same URL.
// Prints {"ok":true,...}.

import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { requireArg, run } from "./lib.mjs";

/** A fresh HOME whose NSS db (~/.pki/nssdb, where Chromium on Linux reads the user's trusted
 *  authorities) trusts the PEM at `ca` for TLS servers, as `certutil` adds it for a person. */
function homeTrusting(ca) {
  const home = mkdtempSync(join(tmpdir(), "wc-viewer-home-"));
  const db = join(home, ".pki", "nssdb");
  mkdirSync(db, { recursive: true });
  execFileSync("certutil", ["-d", `sql:${db}`, "-N", "--empty-password"]);
  execFileSync("certutil", ["-d", `sql:${db}`, "-A", "-t", "C,,", "-n", "wallcrawler-local-ca", "-i", ca]);
  return home;
}

const CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

/** A headless Chromium (the Debian binary), run with `home` as its HOME when given. */
async function launchViewer(puppeteer, args, home) {
  return puppeteer.launch({
    executablePath: requireArg(args, "chrome"),
    headless: true,
    args: CHROME_ARGS,
    env: home ? { ...process.env, HOME: home } : process.env,
  });
}

/** A live-view credential in `mode`, for one page `id` when given (the controller's `token`). */
function minter(args) {
  return (mode, id) => {
    const argv = ["token", "--session-id", requireArg(args, "session"), "--viewer", mode, "--ttl", "600"];
    if (id) argv.push("--page", id);
    const env = { ...process.env, WALLCRAWLER_JWT_PRIVATE_KEY_FILE: requireArg(args, "key-file") };
    return execFileSync(requireArg(args, "mint"), argv, { env, encoding: "utf8" }).trim();
  };
}

const RED = "data:text/html,<title>red</title><body style='margin:0;background:rgb(255,0,0)'>";
const GREEN = "data:text/html,<title>green</title><body style='margin:0;background:rgb(0,255,0)'>";
const FORM =
  "data:text/html,<title>form</title><body style='margin:0'>" +
  "<input id=i style='position:absolute;left:0;top:0;width:400px;height:100px;font-size:40px'>" +
  "<script>window.clicks=[];addEventListener('mousedown',e=>clicks.push([e.clientX,e.clientY]))</script>";

async function targetId(page) {
  const s = await page.createCDPSession();
  const { targetInfo } = await s.send("Target.getTargetInfo");
  await s.detach();
  return targetInfo.targetId;
}

/** Opens the viewer page for `id` in `browser` (a `mode` credential for that page, control
 *  by default); waits for its first frame. */
async function openViewer(browser, base, cred, id, mode = "control") {
  const vp = await browser.newPage();
  await vp.setViewport({ width: 800, height: 600 });
  const q = new URLSearchParams({ t: cred(mode, id), fullscreen: "1" });
  const answer = await vp.goto(`${base}/viewer?${q}`);
  if (answer.status() !== 200) throw new Error(`/viewer answered ${answer.status()}`);
  await vp.waitForFunction(() => window.viewer && window.viewer.frames > 0, { timeout: 10000 });
  return vp;
}

/** Waits until the centre pixel of the viewer's canvas, as drawn, is near `want`. */
/**
 * Waits until the viewer's canvas shows `want` at its centre. The bound is a hang guard (a
 * loaded machine runs every session's recording encoder beside the tests): a failure names
 * the colour wanted and the one shown.
 */
async function canvasShows(vp, want) {
  const centre = (want) => {
    const c = document.getElementById("screen");
    const d = c.getContext("2d").getImageData(c.width >> 1, c.height >> 1, 1, 1).data;
    return { shown: [d[0], d[1], d[2]], ok: [d[0], d[1], d[2]].every((v, i) => Math.abs(v - want[i]) < 40) };
  };
  try {
    await vp.waitForFunction((want) => {
      const c = document.getElementById("screen");
      const d = c.getContext("2d").getImageData(c.width >> 1, c.height >> 1, 1, 1).data;
      return [d[0], d[1], d[2]].every((v, i) => Math.abs(v - want[i]) < 40);
    }, { timeout: 30000, polling: 20 }, want);
  } catch (e) {
    const now = await vp.evaluate(centre, want).catch(() => null);
    const frames = await vp.evaluate(() => window.viewer?.frames).catch(() => null);
    throw new Error(`the canvas did not show ${want} (shows ${now?.shown}, ${frames} frames): ${e.message}`);
  }
}

const near = (px, want) => px.every((v, i) => Math.abs(v - want[i]) < 40);

/** The centre pixel of a PNG screenshot of `vp`, decoded by the viewer's own browser. */
async function screenshotCentre(vp) {
  const png = await vp.screenshot({ encoding: "base64" });
  const scratch = await vp.browser().newPage();
  try {
    return await scratch.evaluate(async (b64) => {
      const img = new Image();
      img.src = "data:image/png;base64," + b64;
      await img.decode();
      const c = document.createElement("canvas");
      c.width = img.width;
      c.height = img.height;
      const ctx = c.getContext("2d");
      ctx.drawImage(img, 0, 0);
      const d = ctx.getImageData(img.width >> 1, img.height >> 1, 1, 1).data;
      return [d[0], d[1], d[2]];
    }, png);
  } finally {
    await scratch.close();
  }
}

/** Clicks the viewer's canvas where the watched page's (x, y) is drawn. */
async function clickAt(vp, x, y) {
  const at = await vp.evaluate(
    (x, y) => {
      const c = document.getElementById("screen");
      const r = c.getBoundingClientRect();
      const d = window.viewer.device;
      const scale = Math.min(r.width / c.width, r.height / c.height);
      const ox = (r.width - c.width * scale) / 2, oy = (r.height - c.height * scale) / 2;
      return [r.left + ox + (x * c.width / d.w) * scale, r.top + oy + (y * c.height / d.h) * scale];
    },
    x,
    y,
  );
  await vp.mouse.click(at[0], at[1]);
}

async function waitForPage(page, fn, arg) {
  await page.waitForFunction(fn, { timeout: 10000, polling: 50 }, arg);
}

const scenarios = {
  async show({ page, viewer, base, cred }) {
    await page.goto(RED);
    const vp = await openViewer(viewer, base, cred, await targetId(page));
    await canvasShows(vp, [255, 0, 0]);
    const shot = await screenshotCentre(vp);
    if (!near(shot, [255, 0, 0])) throw new Error(`screenshot centre ${shot}, not red`);
    const t0 = Date.now();
    await page.goto(GREEN);
    await canvasShows(vp, [0, 255, 0]);
    const followMs = Date.now() - t0;
    const shot2 = await screenshotCentre(vp);
    if (!near(shot2, [0, 255, 0])) throw new Error(`screenshot centre ${shot2}, not green`);
    return { red: shot, green: shot2, followMs };
  },

  async control({ page, viewer, base, cred }) {
    await page.goto(FORM);
    const vp = await openViewer(viewer, base, cred, await targetId(page));
    await clickAt(vp, 100, 50);
    await vp.keyboard.type("abc");
    await waitForPage(page, () => document.getElementById("i").value === "abc" && window.clicks.length > 0);
    return { value: "abc", clicks: await page.evaluate(() => window.clicks) };
  },

  async view({ page, viewer, base, cred }) {
    await page.goto(FORM);
    const id = await targetId(page);
    const watcher = await openViewer(viewer, base, cred, id, "view");
    await clickAt(watcher, 100, 50);
    await watcher.keyboard.type("abc");
    await watcher.keyboard.press("Enter");
    await watcher.mouse.wheel({ deltaY: 300 });
    // Everything the view-only viewer sent has been handled (and dropped) by the server.
    await watcher.evaluate(() => window.viewer.ping());
    // A control viewer of the same page shares its screencast and input queue: its input,
    // queued after, is all the page may have seen.
    const controller = await openViewer(viewer, base, cred, id, "control");
    await clickAt(controller, 100, 50);
    await controller.keyboard.type("z");
    await waitForPage(page, () => document.getElementById("i").value.includes("z"));
    const value = await page.evaluate(() => document.getElementById("i").value);
    const clicks = await page.evaluate(() => window.clicks);
    return { value, clicks: clicks.length };
  },

  async five({ page, viewer, base, cred, args }) {
    await page.goto(RED);
    const id = await targetId(page);
    const viewers = [];
    for (let i = 0; i < 5; i++) viewers.push(await openViewer(viewer, base, cred, id));
    // All five open: a change of the page reaches every one of them through the one screencast.
    const before = await Promise.all(viewers.map((v) => v.evaluate(() => window.viewer.frames)));
    await page.goto(GREEN);
    await Promise.all(viewers.map((v) => canvasShows(v, [0, 255, 0])));
    const after = await Promise.all(viewers.map((v) => v.evaluate(() => window.viewer.frames)));
    const frames = after.map((n, i) => n - before[i]);
    const text = await (await fetch(requireArg(args, "metrics"))).text();
    const m = text.match(/^wallcrawler_viewer_screencasts_started_total (\d+)/m);
    return { frames, screencastsStarted: m ? Number(m[1]) : null };
  },
};

scenarios.sdk = async ({ page, viewer, args, puppeteer }) => {
  await page.goto(RED);
  const id = await targetId(page);
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  const bb = new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0 });
  const debug = await bb.sessions.debug(requireArg(args, "session"));
  const entry = debug.pages.find((p) => p.id === id);
  if (!entry) throw new Error(`sessions.debug() lists no page ${id}: ${debug.pages.map((p) => p.id)}`);
  const url = entry.debuggerFullscreenUrl;
  for (const u of [debug.debuggerFullscreenUrl, url]) {
    if (!String(u).startsWith("https://")) throw new Error(`not an https live view URL: ${u}`);
  }
  const vp = await viewer.newPage();
  await vp.setViewport({ width: 800, height: 600 });
  const answer = await vp.goto(url);
  if (answer.status() !== 200) throw new Error(`${new URL(url).pathname} answered ${answer.status()}`);
  const tls = answer.securityDetails();
  await vp.waitForFunction(() => window.viewer && window.viewer.frames > 0, { timeout: 30000 })
    .catch((e) => { throw new Error(`the live view showed no frame: ${e.message}`); });
  await canvasShows(vp, [255, 0, 0]);
  const red = await screenshotCentre(vp);
  if (!near(red, [255, 0, 0])) throw new Error(`screenshot centre ${red}, not red`);
  const t0 = Date.now();
  await page.goto(GREEN);
  await canvasShows(vp, [0, 255, 0]);
  const followMs = Date.now() - t0;
  const green = await screenshotCentre(vp);
  if (!near(green, [0, 255, 0])) throw new Error(`screenshot centre ${green}, not green`);

  // The trust came from the NSS db: without it the same URL is refused by Chromium.
  const bare = mkdtempSync(join(tmpdir(), "wc-viewer-home-"));
  const untrusting = await launchViewer(puppeteer, args, bare);
  let refused = null;
  try {
    await (await untrusting.newPage()).goto(url);
  } catch (e) {
    refused = String(e.message).match(/net::ERR_[A-Z_]+/)?.[0] ?? String(e.message);
  } finally {
    await untrusting.close();
    rmSync(bare, { recursive: true, force: true });
  }
  return {
    origin: new URL(url).origin,
    protocol: tls ? tls.protocol() : null,
    issuer: tls ? tls.issuer() : null,
    red,
    green,
    followMs,
    untrusted: refused,
  };
};

scenarios.tabs = async ({ page, session, viewer, base, cred }) => {
  await page.goto(RED);
  const green = await session.newPage();
  await green.setViewport({ width: 800, height: 600 });
  await green.goto(GREEN);
  const vp = await viewer.newPage();
  await vp.setViewport({ width: 800, height: 600 });
  await vp.goto(`${base}/viewer?${new URLSearchParams({ t: cred("control") })}`);
  await vp.waitForFunction(
    () => ["red", "green"].every((t) => [...document.querySelectorAll("#tabs button")].some((b) => b.textContent === t)),
    { timeout: 10000, polling: 50 },
  );
  const titles = await vp.$$eval("#tabs button", (bs) => bs.map((b) => b.textContent));
  // The inactive one first, so each click is what changes the picture.
  const first = await vp.$eval("#tabs button.active", (b) => b.textContent);
  const order = first === "red" ? ["green", "red"] : ["red", "green"];
  const colours = { red: [255, 0, 0], green: [0, 255, 0] };
  const pages = { red: page, green };
  const shown = [];
  for (const title of order) {
    // By position: the strip is redrawn whenever a page's title or URL changes, so a handle
    // on a button may be stale; the place of the button is not.
    const [x, y] = await vp.evaluate((t) => {
      const b = [...document.querySelectorAll("#tabs button")].find((b) => b.textContent === t);
      const r = b.getBoundingClientRect();
      return [r.left + r.width / 2, r.top + r.height / 2];
    }, title);
    await vp.mouse.click(x, y);
    await canvasShows(vp, colours[title]);
    // A control viewer's tab click brings that page to the front, as a person's would.
    await pages[title].waitForFunction(() => document.visibilityState === "visible", { timeout: 10000 });
    await vp.waitForFunction((t) => document.querySelector("#tabs button.active")?.textContent === t,
      { timeout: 10000, polling: 50 }, title);
    shown.push(title);
  }
  const active = await vp.$eval("#tabs button.active", (b) => b.textContent);
  return { titles, shown, active };
};

run(async (args) => {
  const url = requireArg(args, "url");
  const scenario = scenarios[requireArg(args, "scenario")];
  if (!scenario) throw new Error(`unknown scenario ${args.scenario}`);
  const u = new URL(url);
  const base = `${u.protocol === "wss:" ? "https" : "http"}://${u.host}`;
  const cred = minter(args);
  const { default: puppeteer } = await import("puppeteer-core");
  const session = await puppeteer.connect({ browserWSEndpoint: url, protocolTimeout: 20000 });
  // With --ca, the viewer trusts that authority the way a person's browser does (never by
  // ignoring certificate errors).
  const home = args.ca ? homeTrusting(args.ca) : undefined;
  const viewer = await launchViewer(puppeteer, args, home);
  try {
    const page = await session.newPage();
    await page.setViewport({ width: 800, height: 600 });
    return await scenario({ page, session, viewer, base, cred, args, puppeteer });
  } finally {
    await viewer.close();
    session.disconnect();
    if (home) rmSync(home, { recursive: true, force: true });
  }
});
