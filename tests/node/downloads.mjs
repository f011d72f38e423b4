// downloads.mjs --base <baseURL> --key <apiKey> --project <projectId> --scenario <name> --out <dir>
//
// A session's downloads through the local platform: the stock Browserbase SDK creates the
// session and reads `sessions.downloads.list(id)`; real clients click links served here on
// 127.0.0.1. Files served and zips read are written to --out for the Rust test to compare.
//   capture:  Playwright (in a new browser context: its own allowAndName behaviour and path)
//             downloads report.csv; Puppeteer, after pointing the browser's download path at
//             --elsewhere (Browser.setDownloadBehavior), downloads data.bin. Then the zip
//             (polled until it holds both) is written to out/downloads.zip.
//   progress: Puppeteer starts a download whose server sends half the body and holds; the
//             SDK's answer is read while it holds (202 + Retry-After expected), then the body
//             is finished and the zip read again (out/downloads.zip).
//   click:    (--url WS instead of the SDK's arguments) Puppeteer points the browser's
//             download path at --elsewhere and downloads export.csv; Chrome's final state.
//   caps:     Playwright downloads small-1.bin, big.bin, small-2.bin and small-3.bin in turn
//             (the platform runs with DOWNLOADS_MAX_FILES=2, DOWNLOADS_MAX_BYTES=4 MiB; the two
//             refused ones are served held, so the refusal reaches the browser first): each
//             download's failure (null = finished) and the zip.
// Prints {"ok":true,"sessionId":…,...}.

import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

import { requireArg, run } from "./lib.mjs";

async function client(args) {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  return new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
}

/** Serves `/` (links to every file) and each file of `files` ({name: Buffer}) as an attachment;
 * `/slow/<name>` sends half the body and holds until `release()`. */
async function serve(files) {
  let releaseSlow;
  const held = new Promise((r) => (releaseSlow = r));
  let slowStarted;
  const started = new Promise((r) => (slowStarted = r));
  const server = http.createServer(async (req, res) => {
    const slow = req.url.startsWith("/slow/");
    const name = decodeURIComponent(req.url.replace(/^\/(slow\/)?/, ""));
    const body = files[name];
    if (!body) {
      res.writeHead(200, { "content-type": "text/html" });
      res.end(Object.keys(files).map((n) => `<a id="${n.replace(/\W/g, "_")}" href="/${n}">${n}</a>`).join(" "));
      return;
    }
    res.writeHead(200, {
      "content-type": "application/octet-stream",
      "content-disposition": `attachment; filename="${name}"`,
      "content-length": body.length,
    });
    if (slow) {
      res.write(body.subarray(0, body.length >> 1));
      slowStarted();
      await held;
      res.end(body.subarray(body.length >> 1));
    } else {
      res.end(body);
    }
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { origin: `http://127.0.0.1:${server.address().port}`, server, release: () => releaseSlow(), started };
}

/** Adds a link to `url` with id `id` to the page. */
async function link(page, url, id) {
  await page.evaluate(([url, id]) => {
    const a = document.createElement("a");
    a.href = url;
    a.id = id;
    a.textContent = id;
    document.body.append(a);
  }, [url, id]);
}

function bytes(out, name, n) {
  const b = crypto.randomBytes(n);
  fs.writeFileSync(path.join(out, name), b);
  return b;
}

/** The SDK's downloads answer: status, Retry-After, and the body. */
async function downloads(bb, id) {
  const res = await bb.sessions.downloads.list(id);
  const body = Buffer.from(await res.arrayBuffer());
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body };
}

/** Zip entry names, read from the central directory (enough for polling). */
function entryNames(zip) {
  const names = [];
  const end = zip.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  if (end < 0) return names;
  let at = zip.readUInt32LE(end + 16);
  const count = zip.readUInt16LE(end + 10);
  for (let i = 0; i < count; i++) {
    const nameLen = zip.readUInt16LE(at + 28);
    const extra = zip.readUInt16LE(at + 30);
    const comment = zip.readUInt16LE(at + 32);
    names.push(zip.subarray(at + 46, at + 46 + nameLen).toString());
    at += 46 + nameLen + extra + comment;
  }
  return names;
}

/** Polls the SDK until the zip (200) has `n` entries; every status seen. */
async function zipWith(bb, id, n) {
  const seen = [];
  const deadline = Date.now() + 40000;
  for (;;) {
    const d = await downloads(bb, id);
    seen.push(d.status);
    if (d.status === 200 && entryNames(d.body).length >= n) return { zip: d.body, seen };
    if (Date.now() > deadline) throw new Error(`the zip never held ${n} entries: statuses ${seen.join(",")}, last ${entryNames(d.body)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function capture(args, bb, session, out) {
  const files = { "report.csv": bytes(out, "report.csv", 3 << 20), "data.bin": bytes(out, "data.bin", 2 << 20) };
  const site = await serve(files);
  const elsewhere = requireArg(args, "elsewhere");
  const { chromium } = await import("playwright-core");
  const pw = await chromium.connectOverCDP(session.connectUrl, { timeout: 20000 });
  const context = await pw.newContext({ acceptDownloads: true });
  const page = await context.newPage();
  await page.goto(site.origin + "/");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#report_csv")]);
  const playwright = { suggested: download.suggestedFilename(), failure: await download.failure() };
  await context.close();
  await pw.close();

  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.connect({ browserWSEndpoint: session.connectUrl, protocolTimeout: 20000 });
  const cdp = await browser.target().createCDPSession();
  await cdp.send("Browser.setDownloadBehavior", { behavior: "allow", downloadPath: elsewhere, eventsEnabled: true });
  const done = new Promise((resolve) => cdp.on("Browser.downloadProgress", (e) => e.state !== "inProgress" && resolve(e.state)));
  const p = await browser.newPage();
  await p.goto(site.origin + "/");
  await p.click("#data_bin");
  const state = await done;
  await p.close();
  browser.disconnect();
  const { zip, seen } = await zipWith(bb, session.id, 2);
  fs.writeFileSync(path.join(out, "downloads.zip"), zip);
  site.server.close();
  return { playwright, puppeteer: { state }, statuses: seen };
}

async function progress(args, bb, session, out) {
  const files = { "slow.bin": bytes(out, "slow.bin", 4 << 20) };
  const site = await serve(files);
  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.connect({ browserWSEndpoint: session.connectUrl, protocolTimeout: 20000 });
  const p = await browser.newPage();
  await p.goto(site.origin + "/");
  await link(p, site.origin + "/slow/slow.bin", "go");
  await p.click("#go");
  await site.started;
  // Held: the answer must say "in progress" (bounded wait for the controller's write).
  let held;
  const deadline = Date.now() + 20000;
  for (;;) {
    held = await downloads(bb, session.id);
    if (held.status !== 200 || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  site.release();
  const { zip, seen } = await zipWith(bb, session.id, 1);
  fs.writeFileSync(path.join(out, "downloads.zip"), zip);
  await p.close();
  browser.disconnect();
  site.server.close(); // the held response has ended by now
  return { held: { status: held.status, retryAfter: held.retryAfter, body: held.body.toString().slice(0, 200) }, statuses: seen };
}

async function caps(args, bb, session, out) {
  const files = {
    "small-1.bin": bytes(out, "small-1.bin", 1 << 20),
    "big.bin": bytes(out, "big.bin", 5 << 20),
    "small-2.bin": bytes(out, "small-2.bin", 1 << 20),
    "small-3.bin": bytes(out, "small-3.bin", 1 << 20),
  };
  const site = await serve(files);
  const { chromium } = await import("playwright-core");
  const pw = await chromium.connectOverCDP(session.connectUrl, { timeout: 20000 });
  const context = await pw.newContext({ acceptDownloads: true });
  const page = await context.newPage();
  await page.goto(site.origin + "/");
  // The refused ones are served held (half the body, then nothing), so the refusal reaches
  // the browser before the download could finish.
  const failures = {};
  for (const name of Object.keys(files)) {
    const held = name === "big.bin" || name === "small-3.bin";
    await link(page, `${site.origin}/${held ? "slow/" : ""}${name}`, "go" + name.replace(/\W/g, "_"));
    const [d] = await Promise.all([page.waitForEvent("download"), page.click("#go" + name.replace(/\W/g, "_"))]);
    failures[name] = await d.failure();
  }
  site.release();
  await context.close();
  await pw.close();
  const { zip, seen } = await zipWith(bb, session.id, 2);
  fs.writeFileSync(path.join(out, "downloads.zip"), zip);
  site.server.close();
  return { failures, statuses: seen };
}

/** No platform: Puppeteer on --url points the browser's downloads at --elsewhere and downloads
 * export.csv; Chrome's final state for it. */
async function click(args, out) {
  const files = { "export.csv": bytes(out, "export.csv", 3 << 20) };
  const site = await serve(files);
  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.connect({ browserWSEndpoint: requireArg(args, "url"), protocolTimeout: 20000 });
  const cdp = await browser.target().createCDPSession();
  await cdp.send("Browser.setDownloadBehavior", { behavior: "allowAndName", downloadPath: requireArg(args, "elsewhere"), eventsEnabled: true });
  const done = new Promise((resolve) => cdp.on("Browser.downloadProgress", (e) => e.state !== "inProgress" && resolve(e.state)));
  const p = await browser.newPage();
  await p.goto(site.origin + "/");
  await p.click("#export_csv");
  const state = await done;
  await p.close();
  browser.disconnect();
  site.server.close();
  return { state };
}

run(async (args) => {
  if (args.scenario === "click") return click(args, requireArg(args, "out"));
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const out = requireArg(args, "out");
  const session = await bb.sessions.create({ projectId });
  const scenario = { capture, progress, caps }[requireArg(args, "scenario")];
  if (!scenario) throw new Error("unknown scenario");
  const r = await scenario(args, bb, session, out);
  await bb.sessions.update(session.id, { status: "REQUEST_RELEASE", projectId });
  return { sessionId: session.id, ...r };
}, { defaultTimeoutMs: 90000 });
