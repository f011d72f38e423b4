// egress-bench.mjs --controller <binary> --chrome <binary> [--mib 50] [--runs 5]
//
// The egress hop's cost on a download: a page on 127.0.0.1 fetches MIB MiB (one response, the
// body read whole) RUNS times in each of three set-ups, after one warm-up fetch each:
//   chrome:   Chromium launched directly (puppeteer-core), no hop — the baseline;
//   hop:      `wallcrawler-controller run` (CHROME_NETWORK=shared, EGRESS_ALLOW=127.0.0.1): every
//             byte through the controller's SOCKS5 hop, direct;
//   proxy:    the same, with the session's one route through a local HTTP CONNECT proxy with
//             Basic authentication (tests/node/proxies.mjs, in this process).
// For each: the median and best time, and the controller's CPU seconds per download (utime +
// stime from /proc, clock ticks at 100 Hz). Prints one JSON object.
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
const MIB = Number(args.mib ?? 50);
const RUNS = Number(args.runs ?? 5);

const body = Buffer.alloc(MIB << 20, 120);
const server = http.createServer((req, res) => {
  if (req.url === "/big") {
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length, "cache-control": "no-store" });
    res.end(body);
  } else {
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<title>bench</title>");
  }
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const origin = `http://127.0.0.1:${server.address().port}`;

function cpuTicks(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]);
}

async function downloads(page, pid) {
  await page.goto(`${origin}/`);
  const once = () => page.evaluate(async (u) => {
    const t0 = performance.now();
    const b = await (await fetch(u, { cache: "no-store" })).arrayBuffer();
    return { ms: performance.now() - t0, bytes: b.byteLength };
  }, `${origin}/big`);
  await once();
  const times = [];
  const c0 = pid ? cpuTicks(pid) : 0;
  for (let i = 0; i < RUNS; i++) {
    const r = await once();
    if (r.bytes !== body.length) throw new Error(`short read: ${r.bytes}`);
    times.push(r.ms);
  }
  const cpu = pid ? (cpuTicks(pid) - c0) / 100 / RUNS : null;
  times.sort((a, b) => a - b);
  return { medianMs: Math.round(times[Math.floor(times.length / 2)]), bestMs: Math.round(times[0]), controllerCpuSecondsPerDownload: cpu };
}

async function direct() {
  const { default: puppeteer } = await import("puppeteer-core");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "egress-bench-"));
  const browser = await puppeteer.launch({ executablePath: chromePath, headless: true, userDataDir: dir,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"] });
  try {
    return await downloads(await browser.newPage(), null);
  } finally {
    await browser.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function throughController(egress) {
  const { default: puppeteer } = await import("puppeteer-core");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "egress-bench-"));
  execFileSync("openssl", ["genpkey", "-algorithm", "ed25519", "-out", `${dir}/key.pem`]);
  const pub = execFileSync("openssl", ["pkey", "-in", `${dir}/key.pem`, "-pubout"]).toString();
  const token = execFileSync(controller, ["token", "--session-id", "sess_bench"], { env: { ...process.env, WALLCRAWLER_JWT_PRIVATE_KEY_FILE: `${dir}/key.pem` } }).toString().trim();
  const env = { PATH: process.env.PATH, HOME: process.env.HOME ?? "/root", SESSION_ID: "sess_bench", WALLCRAWLER_JWT_PUBLIC_KEY: pub,
    CDP_PROXY_PORT: "0", CDP_PROXY_HOST: "127.0.0.1", CHROME_DEBUG_PORT: "0", CHROME_PATH: chromePath, METRICS_ADDR: "", LOG_FORMAT: "text", CHROME_NETWORK: "shared",
    EGRESS_ALLOW: "127.0.0.1", KEEP_ALIVE: "true", RUST_LOG: "info" };
  if (egress) env.SESSION_EGRESS = JSON.stringify(egress);
  const child = spawn(controller, ["run"], { env, stdio: ["ignore", "ignore", "pipe"] });
  try {
    const addr = await new Promise((resolve, reject) => {
      let log = "";
      let at = null;
      child.on("exit", (code) => reject(new Error(`controller exited ${code}: ${log.slice(-2000)}`)));
      child.stderr.on("data", (d) => {
        log += d;
        at ??= log.match(/proxy listening addr=([0-9.:]+)/)?.[1];
        if (at && log.includes("session ready")) resolve(at);
      });
    });
    const browser = await puppeteer.connect({ browserWSEndpoint: `ws://${addr}/?signingKey=${token}`, protocolTimeout: 120000 });
    try {
      return await downloads(await browser.newPage(), child.pid);
    } finally {
      await browser.disconnect();
    }
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => (child.exitCode !== null ? r() : child.on("exit", r)));
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const proxy = await httpProxy({ user: "bench", pass: "bench-password" });
const result = { mib: MIB, runs: RUNS };
result.chrome = await direct();
result.hop = await throughController(null);
result.proxy = await throughController({ routes: [{ proxy: { scheme: "http", host: "127.0.0.1", port: proxy.port, username: "bench", password: "bench-password" } }] });
result.hopAddedPercent = Math.round((result.hop.medianMs / result.chrome.medianMs - 1) * 1000) / 10;
result.proxiedBytesSeenByProxy = proxy.bytes;
console.log(JSON.stringify(result));
proxy.close();
server.close();
process.exit(0);
