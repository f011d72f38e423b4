// viewer-bench.mjs --url WS --mint BIN --key-file PEM --chrome PATH
//                  --controller-pid PID --part cpu|latency [--viewers N] [--secs T]
//                  [--warmup-secs W] [--changes N]
//
// The live viewer's cost and delay, measured on a `local` controller (what
// scripts/bench/viewer.sh runs). Puppeteer on the session (--url) drives the watched page; a
// second headless Chromium (puppeteer-core `launch`, --chrome) opens N viewer pages of it, each
// with a control credential for that page from `BIN token --viewer control --page ID`.
//
//   cpu:     the page changes colour on every animation frame (requestAnimationFrame). After
//            --warmup-secs with the N viewers drawing, CPU time is read from /proc
//            (utime+stime, plus cutime+cstime of Chrome's processes so that a helper exiting in
//            the window still counts) for --secs: the controller (--controller-pid itself), its
//            Chrome (every descendant of the controller) and the viewers' Chromium (the client
//            side, for reference). Reports CPU seconds per wall second and frames drawn per
//            second by each viewer. N = 0 is the animation without any viewer.
//   latency: the page is one colour; --changes times, node records Date.now(), tells the page
//            (Runtime.evaluate over the session) to take the next colour of a palette, and the
//            first viewer records Date.now() when a frame it draws on its canvas first has that
//            colour at its centre (CanvasRenderingContext2D.drawImage wrapped before the
//            viewer's script runs). Both clocks are this machine's wall clock. Reports p50/p90
//            of command → drawn and of the page's own Date.now() at the change → drawn.
// Prints {"ok":true,...}.

import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { requireArg, run } from "./lib.mjs";

const html = (text) => "data:text/html," + encodeURIComponent(text);
const ANIMATED = html(
  "<title>animated</title><body style='margin:0'><script>" +
  "window.painted=0;(function f(){document.body.style.background=`hsl(${(++painted*7)%360},100%,50%)`;" +
  "requestAnimationFrame(f)})()</script>");
const STILL = html("<title>still</title><body style='margin:0;background:rgb(0,0,0)'>");
const PALETTE = [
  [255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [0, 255, 255], [255, 0, 255], [255, 255, 255],
];

const TICKS = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());

/** `/proc/<pid>/stat` fields after the command name: [state, ppid, ...]; null once gone. */
function stat(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    return s.slice(s.lastIndexOf(")") + 2).split(" ");
  } catch {
    return null;
  }
}

/** CPU seconds of `pid` alone (utime+stime) and of its descendants (each one's
 *  utime+stime+cutime+cstime: a child reaped in the window moves its time into its parent's). */
function cpu(pid) {
  const parent = new Map();
  const fields = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const f = stat(name);
    if (!f) continue;
    parent.set(Number(name), Number(f[1]));
    fields.set(Number(name), f);
  }
  const isDescendant = (p) => {
    for (let q = parent.get(p); q !== undefined && q > 1; q = parent.get(q)) if (q === pid) return true;
    return false;
  };
  const own = fields.get(pid);
  const self = own ? (Number(own[11]) + Number(own[12])) / TICKS : 0;
  let tree = 0;
  for (const [p, f] of fields) {
    if (isDescendant(p)) tree += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / TICKS;
  }
  return { self, tree };
}

/** The session id in the connect URL's token (`signingKey`). */
function sessionOf(url) {
  const token = new URL(url).searchParams.get("signingKey");
  return JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).sessionId;
}

function minter(args) {
  return (id) => {
    const argv = ["token", "--session-id", sessionOf(requireArg(args, "url")), "--viewer", "control",
      "--ttl", "600", "--page", id];
    const env = { ...process.env, WALLCRAWLER_JWT_PRIVATE_KEY_FILE: requireArg(args, "key-file") };
    return execFileSync(requireArg(args, "mint"), argv, { env, encoding: "utf8" }).trim();
  };
}

async function targetId(page) {
  const s = await page.createCDPSession();
  const { targetInfo } = await s.send("Target.getTargetInfo");
  await s.detach();
  return targetInfo.targetId;
}

/** Records in `window.drawn` the Date.now() of the first drawImage whose canvas centre is near
 *  `window.want` (set by the bench before each change). */
function hookDraws() {
  const draw = CanvasRenderingContext2D.prototype.drawImage;
  CanvasRenderingContext2D.prototype.drawImage = function (...a) {
    draw.apply(this, a);
    const want = window.want;
    if (!want) return;
    const c = this.canvas;
    const d = this.getImageData(c.width >> 1, c.height >> 1, 1, 1).data;
    if ([0, 1, 2].every((i) => Math.abs(d[i] - want[i]) < 40)) {
      window.drawn = Date.now();
      window.want = null;
    }
  };
}

async function openViewer(browser, base, token, hook) {
  const vp = await browser.newPage();
  await vp.setViewport({ width: 800, height: 600 });
  if (hook) await vp.evaluateOnNewDocument(hookDraws);
  const answer = await vp.goto(`${base}/viewer?${new URLSearchParams({ t: token, fullscreen: "1" })}`);
  if (answer.status() !== 200) throw new Error(`/viewer answered ${answer.status()}`);
  await vp.waitForFunction(() => window.viewer && window.viewer.frames > 0, { timeout: 20000 });
  return vp;
}

const frames = (vps) => Promise.all(vps.map((v) => v.evaluate(() => window.viewer.frames)));
const pause = (ms) => new Promise((r) => setTimeout(r, ms));
const round = (x, d = 3) => Math.round(x * 10 ** d) / 10 ** d;

function quantile(values, q) {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
}

async function cpuPart({ page, viewers, viewer, args }) {
  const secs = Number(args.secs ?? 20);
  const ctl = Number(requireArg(args, "controller-pid"));
  const client = viewer.process().pid;
  await pause(Number(args["warmup-secs"] ?? 3) * 1000);
  const f0 = await frames(viewers);
  const p0 = await page.evaluate(() => window.painted);
  const c0 = cpu(ctl), v0 = cpu(client), t0 = performance.now();
  await pause(secs * 1000);
  const c1 = cpu(ctl), v1 = cpu(client), t1 = performance.now();
  const f1 = await frames(viewers);
  const p1 = await page.evaluate(() => window.painted);
  const wall = (t1 - t0) / 1000;
  // The viewers' browser process itself plus its helpers.
  const clientCpu = (v1.tree - v0.tree) + (v1.self - v0.self);
  return {
    viewers: viewers.length,
    wallSecs: round(wall),
    cpuPerSec: {
      controller: round((c1.self - c0.self) / wall),
      chrome: round((c1.tree - c0.tree) / wall),
      viewerClient: round(clientCpu / wall),
    },
    framesPerSec: f1.map((n, i) => round((n - f0[i]) / wall, 1)),
    pageFramesPerSec: round((p1 - p0) / wall, 1),
  };
}

async function latencyPart({ page, viewers, args }) {
  const changes = Number(args.changes ?? 50);
  const vp = viewers[0];
  const fromCommand = [], fromPage = [];
  for (let i = 0; i < changes; i++) {
    const colour = PALETTE[i % PALETTE.length];
    await vp.evaluate((c) => { window.want = c; window.drawn = 0; }, colour);
    const sent = Date.now();
    const applied = await page.evaluate((c) => {
      document.body.style.background = `rgb(${c})`;
      return Date.now();
    }, colour);
    await vp.waitForFunction(() => window.drawn > 0, { timeout: 10000, polling: 5 });
    const drawn = await vp.evaluate(() => window.drawn);
    fromCommand.push(drawn - sent);
    fromPage.push(drawn - applied);
    // Spacing between changes, so that each is measured on its own.
    await pause(100 + Math.floor(Math.random() * 50));
  }
  const sum = (v) => ({ p50: quantile(v, 0.5), p90: quantile(v, 0.9), min: Math.min(...v), max: Math.max(...v) });
  return { viewers: viewers.length, changes, ms: { fromCommand: sum(fromCommand), fromPage: sum(fromPage) } };
}

run(async (args) => {
  const url = requireArg(args, "url");
  const part = requireArg(args, "part");
  if (part !== "cpu" && part !== "latency") throw new Error(`unknown part ${part}`);
  const n = Number(args.viewers ?? 1);
  const base = `http://${new URL(url).host}`;
  const { default: puppeteer } = await import("puppeteer-core");
  const session = await puppeteer.connect({ browserWSEndpoint: url, protocolTimeout: 30000 });
  const viewer = await puppeteer.launch({
    executablePath: requireArg(args, "chrome"),
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await session.newPage();
    await page.setViewport({ width: 800, height: 600 });
    await page.goto(part === "cpu" ? ANIMATED : STILL);
    const token = minter(args)(await targetId(page));
    const viewers = [];
    for (let i = 0; i < n; i++) viewers.push(await openViewer(viewer, base, token, part === "latency"));
    if (part === "latency" && n === 0) throw new Error("latency needs a viewer");
    return part === "cpu"
      ? await cpuPart({ page, viewers, viewer, args })
      : await latencyPart({ page, viewers, args });
  } finally {
    await viewer.close();
    session.disconnect();
  }
});
