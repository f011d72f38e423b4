// block-ads-bench.mjs --controller <binary> --chrome <binary> [--runs 10] [--rounds 3]
//
// blockAds' cost on page loads: `wallcrawler-controller run` (CHROME_NETWORK=shared) without and
// with SESSION_BROWSER={"blockAds":true}, each loading two pages of 200 subresources (100
// images, 60 scripts, 40 stylesheets, each its own URL, no-store, the browser's cache off):
//   plain: every subresource from one of 10 site hosts (127.0.0.2 … 127.0.0.11, direct through
//          the hop): what checking every connection's host costs, nothing being blocked;
//   ads:   the same with 20 of them on 4 ad and tracking hosts (pagead2.googlesyndication.com,
//          g.doubleclick.net, ib.adnxs.com, sb.scorecardresearch.com: none on Chrome's HSTS
//          preload list, which would turn http:// into https:// before the hop), routed
//          to a local HTTP proxy whose stand-in answers them (tests/node/proxies.mjs: never the
//          network); with blockAds the hop refuses them.
// Each round starts one controller per setting (each with its own proxy) and keeps both
// running; each page is loaded twice uncounted in each, then RUNS times, the two taking turns
// load by load (who goes first alternating), so the machine's drift hits both alike. Per load
// the wall time of page.goto(…, {waitUntil: "load"}) and how many subresources loaded; the
// median of the paired differences (with − without) besides each setting's median. Also the controller's start to
// "session ready" (with blockAds that includes building the filter engine, logged as
// "ad block lists loaded … ms=") and its CPU seconds per page load. Prints one JSON object.
import http from "node:http";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawn, execFileSync } from "node:child_process";
import { requireArg } from "./lib.mjs";
import { httpProxy } from "./proxies.mjs";

const argv = process.argv.slice(2);
const args = {};
for (let i = 0; i < argv.length; i += 2) args[argv[i].replace(/^--/, "")] = argv[i + 1];
const controller = requireArg(args, "controller");
const chromePath = requireArg(args, "chrome");
const RUNS = Number(args.runs ?? 10);
const ROUNDS = Number(args.rounds ?? 3);

const AD_HOSTS = ["pagead2.googlesyndication.com", "g.doubleclick.net", "ib.adnxs.com", "sb.scorecardresearch.com"];
const GIF = Buffer.from("R0lGODlhAQABAAAAACH5BAEAAAAALAAAAAABAAEAAAIBAAA=", "base64");

/** Answers any subresource by its extension: a 1x1 GIF, a small script or stylesheet. */
function subresource(req, res) {
  const kind = new URL(req.url, "http://x").pathname.split(".").pop();
  const type = { gif: "image/gif", js: "text/javascript", css: "text/css" }[kind] ?? "text/plain";
  res.writeHead(200, { "content-type": type, "cache-control": "no-store" });
  if (kind === "gif") res.end(GIF);
  else if (kind === "js") res.end(`// ${"x".repeat(2000)}`);
  else res.end(`.c${req.url.length} { color: red; } /* ${"x".repeat(2000)} */`);
}

async function listen(server, host) {
  await new Promise((r) => server.listen(0, host, r));
  return server.address().port;
}

const sites = [];
for (let i = 2; i <= 11; i++) sites.push(`127.0.0.${i}:${await listen(http.createServer(subresource), `127.0.0.${i}`)}`);
const standIn = http.createServer(subresource);
const standInPort = await listen(standIn, "127.0.0.1");

/** 200 subresources, each counted in `window.got` when it loads; with `ads`, 20 of them (10
 *  images, 10 scripts) on the ad hosts. */
function page(ads, n) {
  const tags = [];
  for (let i = 0; i < 200; i++) {
    const ad = ads && (i % 20 === 4 || i % 20 === 17);
    const host = ad ? AD_HOSTS[(i / 20 | 0) % AD_HOSTS.length] : sites[i % sites.length];
    const u = `http://${host}/r${i}-${n}`;
    const counted = `onload="window.got=(window.got??0)+1"`;
    if (i % 10 < 5) tags.push(`<img src="${u}.gif" ${counted}>`);
    else if (i % 10 < 8) tags.push(`<script src="${u}.js" ${counted}></script>`);
    else tags.push(`<link rel="stylesheet" href="${u}.css" ${counted}>`);
  }
  return `<!doctype html><title>bench</title>${tags.join("\n")}`;
}
let served = 0;
const main = http.createServer((req, res) => {
  res.writeHead(200, { "content-type": "text/html", "cache-control": "no-store" });
  res.end(page(req.url.startsWith("/ads"), served++));
});
const origin = `http://127.0.0.1:${await listen(main, "127.0.0.1")}`;

function cpuTicks(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]);
}

/** Starts a controller with `browserSettings` and its own proxy (the ad hosts' route); its
 *  tab, ready to load the bench's pages. */
async function start(browserSettings, out) {
  const { default: puppeteer } = await import("puppeteer-core");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "block-ads-bench-"));
  execFileSync("openssl", ["genpkey", "-algorithm", "ed25519", "-out", `${dir}/key.pem`]);
  const pub = execFileSync("openssl", ["pkey", "-in", `${dir}/key.pem`, "-pubout"]).toString();
  const token = execFileSync(controller, ["token", "--session-id", "sess_bench"], { env: { ...process.env, WALLCRAWLER_JWT_PRIVATE_KEY_FILE: `${dir}/key.pem` } }).toString().trim();
  const proxy = await httpProxy({ user: "bench", pass: "bench-password", standIn: standInPort });
  const adPattern = AD_HOSTS.map((h) => h.replaceAll(".", "\\.")).join("|");
  const env = { PATH: process.env.PATH, HOME: process.env.HOME ?? "/root", SESSION_ID: "sess_bench", WALLCRAWLER_JWT_PUBLIC_KEY: pub,
    CDP_PROXY_PORT: "0", CDP_PROXY_HOST: "127.0.0.1", CHROME_DEBUG_PORT: "0", CHROME_PATH: chromePath, METRICS_ADDR: "", LOG_FORMAT: "text", CHROME_NETWORK: "shared",
    EGRESS_ALLOW: "127.0.0.0/8", KEEP_ALIVE: "true", RUST_LOG: "info",
    SESSION_EGRESS: JSON.stringify({ routes: [{ domainPattern: adPattern, proxy: { scheme: "http", host: "127.0.0.1", port: proxy.port, username: "bench", password: "bench-password" } }] }) };
  if (browserSettings) env.SESSION_BROWSER = JSON.stringify(browserSettings);
  const started = performance.now();
  const child = spawn(controller, ["run"], { env, stdio: ["ignore", "ignore", "pipe"] });
  const stop = async () => {
    child.kill("SIGTERM");
    await new Promise((r) => (child.exitCode !== null ? r() : child.on("exit", r)));
    proxy.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  let log = "";
  try {
    const addr = await new Promise((resolve, reject) => {
      let at = null;
      child.on("exit", (code) => reject(new Error(`controller exited ${code}: ${log.slice(-2000)}`)));
      child.stderr.on("data", (d) => {
        log += d;
        at ??= log.match(/proxy listening addr=([0-9.:]+)/)?.[1];
        if (at && log.includes("session ready")) resolve(at);
      });
    });
    out.readyMs.push(Math.round(performance.now() - started));
    const built = log.match(/ad block lists loaded.* ms=(\d+)/)?.[1];
    if (built) out.engineBuildMs.push(Number(built));
    const browser = await puppeteer.connect({ browserWSEndpoint: `ws://${addr}/?signingKey=${token}`, protocolTimeout: 120000 });
    const tab = await browser.newPage();
    await tab.setCacheEnabled(false);
    const load = async (which) => {
      const t0 = performance.now();
      await tab.goto(`${origin}/${which}`, { waitUntil: "load", timeout: 60000 });
      const ms = performance.now() - t0;
      return { ms, got: await tab.evaluate(() => window.got ?? 0) };
    };
    return {
      load, proxy, pid: child.pid,
      close: async () => { await browser.disconnect(); await stop(); },
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const tenth = (x) => Math.round(x * 10) / 10;
const settings = { without: null, with: { blockAds: true } };
const results = {};
for (const name of Object.keys(settings)) {
  results[name] = { plain: [], ads: [], plainLoaded: new Set(), adsLoaded: new Set(), readyMs: [], engineBuildMs: [], controllerCpuSecondsPerLoad: [], proxyAsks: 0 };
}
// with − without, load by load (the two taking turns, so the machine's drift hits both).
const added = { plain: [], ads: [] };
for (let round = 0; round < ROUNDS; round++) {
  const names = round % 2 ? ["with", "without"] : ["without", "with"];
  const running = {};
  for (const name of names) running[name] = await start(settings[name], results[name]);
  try {
    for (const name of names) for (const which of ["plain", "ads", "plain", "ads"]) await running[name].load(which);
    const asked = Object.fromEntries(names.map((n) => [n, running[n].proxy.log.length]));
    const c0 = Object.fromEntries(names.map((n) => [n, cpuTicks(running[n].pid)]));
    for (let i = 0; i < RUNS; i++) {
      for (const which of ["plain", "ads"]) {
        const ms = {};
        for (const name of i % 2 ? [...names].reverse() : names) {
          const r = await running[name].load(which);
          results[name][which].push(r.ms);
          results[name][`${which}Loaded`].add(r.got);
          ms[name] = r.ms;
        }
        added[which].push(ms.with - ms.without);
      }
    }
    for (const n of names) {
      results[n].controllerCpuSecondsPerLoad.push((cpuTicks(running[n].pid) - c0[n]) / 100 / (2 * RUNS));
      results[n].proxyAsks += running[n].proxy.log.length - asked[n];
    }
  } finally {
    for (const name of names) await running[name].close();
  }
}
const summary = { runs: RUNS, rounds: ROUNDS, subresources: 200 };
for (const [name, r] of Object.entries(results)) {
  summary[name] = {
    plainMedianMs: tenth(median(r.plain)),
    plainBestMs: tenth(Math.min(...r.plain)),
    adsMedianMs: tenth(median(r.ads)),
    adsBestMs: tenth(Math.min(...r.ads)),
    adHostsAskedOfTheProxy: r.proxyAsks,
    subresourcesLoaded: { plain: [...r.plainLoaded], ads: [...r.adsLoaded] },
    readyMs: r.readyMs,
    engineBuildMs: r.engineBuildMs,
    controllerCpuSecondsPerLoad: Math.round(median(r.controllerCpuSecondsPerLoad) * 1000) / 1000,
  };
}
summary.addedMedianMs = { plain: tenth(median(added.plain)), ads: tenth(median(added.ads)) };
summary.plainAddedPercent = tenth((summary.with.plainMedianMs / summary.without.plainMedianMs - 1) * 100);
summary.adsAddedPercent = tenth((summary.with.adsMedianMs / summary.without.adsMedianMs - 1) * 100);
console.log(JSON.stringify(summary));
for (const s of [main, standIn]) s.close();
process.exit(0);
