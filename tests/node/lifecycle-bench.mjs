// lifecycle-bench.mjs --base <baseURL> --key <apiKey> --project <projectId> [--runs N] [--warmup N]
//                     [--pause-ms MS] [--settings JSON]
//
// The whole life of a session as a user's script lives it, N times in sequence, with the stock
// Browserbase SDK and Playwright (what scripts/bench/lifecycle.sh runs against the local
// platform): create (`bb.sessions.create`) → connect (`chromium.connectOverCDP(connectUrl)`) →
// goto a small page (served by this script on 127.0.0.1) → release
// (`bb.sessions.update(id, {status: "REQUEST_RELEASE"})`). Playwright's connection is dropped
// after the release, outside the timings. `--pause-ms` waits that long between sessions (outside
// the timings), as a user's script does between its sessions; 0 runs them back to back. Prints one JSON line per run, then the summary:
// p50/p90/min/max per step and for the whole, in milliseconds.

import { createServer } from "node:http";
import { emit, requireArg, run } from "./lib.mjs";

const PAGE = "<!doctype html><title>bench</title><h1>hello</h1>";

function serve() {
  return new Promise((resolve) => {
    const server = createServer((_, res) => {
      res.writeHead(200, { "content-type": "text/html", "content-length": Buffer.byteLength(PAGE) });
      res.end(PAGE);
    });
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

function quantile(sorted, q) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

function summary(values) {
  const s = [...values].sort((a, b) => a - b);
  const r = (x) => (x === null ? null : Math.round(x * 10) / 10);
  return { p50: r(quantile(s, 0.5)), p90: r(quantile(s, 0.9)), min: r(s[0]), max: r(s[s.length - 1]) };
}

async function once(bb, chromium, projectId, url, settings) {
  const t0 = performance.now();
  const session = await bb.sessions.create({ projectId, ...settings });
  const t1 = performance.now();
  if (!session.connectUrl) throw new Error(`create answered ${session.status} without a connectUrl`);
  const browser = await chromium.connectOverCDP(session.connectUrl, { timeout: 30000 });
  const t2 = performance.now();
  const context = browser.contexts()[0] ?? (await browser.newContext());
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(url);
  const t3 = performance.now();
  await bb.sessions.update(session.id, { status: "REQUEST_RELEASE", projectId });
  const t4 = performance.now();
  await browser.close().catch(() => {});
  return { id: session.id, status: session.status, create: t1 - t0, connect: t2 - t1, goto: t3 - t2, release: t4 - t3, total: t4 - t0 };
}

run(async (args) => {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  const { chromium } = await import("playwright-core");
  const bb = new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
  const projectId = requireArg(args, "project");
  const runs = Number(args.runs ?? 10);
  const warmup = Number(args.warmup ?? 1);
  const pauseMs = Number(args["pause-ms"] ?? 0);
  // What every create asks for besides the project (`--settings '{"browserSettings":…}'`).
  const settings = args.settings ? JSON.parse(args.settings) : {};
  const server = await serve();
  const url = `http://127.0.0.1:${server.address().port}/`;
  const results = [];
  try {
    for (let i = 0; i < warmup + runs; i++) {
      if (i > 0 && pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs));
      const r = await once(bb, chromium, projectId, url, settings);
      if (i >= warmup) {
        results.push(r);
        emit({ run: results.length, ...Object.fromEntries(Object.entries(r).map(([k, v]) => [k, typeof v === "number" ? Math.round(v * 10) / 10 : v])) });
      }
    }
  } finally {
    server.close();
  }
  const steps = ["create", "connect", "goto", "release", "total"];
  return { runs, pauseMs, ms: Object.fromEntries(steps.map((s) => [s, summary(results.map((r) => r[s]))])) };
}, { defaultTimeoutMs: 600000 });
