// uploads.mjs --base <baseURL> --key <apiKey> --project <projectId> --session <id>
//             --connect <connectUrl> --file <path> --also <path given by another upload>
// uploads.mjs --connect <connectUrl> --paths <path,...>   (only what the page reads of each)
//
// Files into a session's browser with the stock Browserbase SDK and Puppeteer, as users do:
// `sessions.uploads.create(id, { file })` of --file (multipart `file`), then Puppeteer's
// `uploadFile` with the path the answer gave, and with --also (another client's upload), and
// with a path in the uploads directory nothing was uploaded to; each time the page's
// FileReader reads what the input holds. Then the refusals: a file one byte over the limit,
// and an upload after the session's release. Prints {"ok":true,...}; the Rust test decides.

import fs from "node:fs";
import http from "node:http";
import puppeteer from "puppeteer-core";
import { requireArg, run } from "./lib.mjs";

const PAGE = "data:text/html,<input type=file id=f>";
const LIMIT = 4 * 1024 * 1024;

/** The page's file input's files, read by FileReader: [{name, base64}]. */
const READ_FILES = `(async () => {
  const out = [];
  for (const f of document.getElementById('f').files) {
    const buf = await new Promise((ok, no) => {
      const r = new FileReader();
      r.onload = () => ok(r.result);
      r.onerror = () => no(r.error);
      r.readAsArrayBuffer(f);
    }).catch(() => null);
    const bytes = buf ? Array.from(new Uint8Array(buf), (b) => String.fromCharCode(b)).join('') : null;
    out.push({ name: f.name, base64: bytes === null ? null : btoa(bytes) });
  }
  return JSON.stringify(out);
})()`;

async function refusal(f) {
  try {
    await f();
    return { status: "accepted" };
  } catch (e) {
    return { status: e.status, message: e.error?.message ?? e.message };
  }
}

/** Puppeteer on `url` sets each of `paths` on a file input in turn: what the page read. */
async function readThrough(url, paths) {
  const browser = await puppeteer.connect({ browserWSEndpoint: url, defaultViewport: null });
  const page = await browser.newPage();
  await page.goto(PAGE);
  const input = await page.$("#f");
  const read = {};
  for (const [what, path] of Object.entries(paths)) {
    let error = null;
    try {
      await input.uploadFile(path);
    } catch (e) {
      error = String(e.message || e);
    }
    read[what] = { error, files: JSON.parse(await page.evaluate(READ_FILES)) };
    await page.evaluate(() => { document.getElementById("f").value = ""; });
  }
  await page.close();
  await browser.disconnect();
  return read;
}

run(async (args) => {
  // --connect <url> --paths <p1,p2,…> alone: only what the page reads of each path.
  if (args.paths) {
    const paths = Object.fromEntries(args.paths.split(",").map((p, i) => [String(i), p]));
    return { read: await readThrough(requireArg(args, "connect"), paths) };
  }
  const { default: Browserbase, toFile } = await import("@browserbasehq/sdk");
  const bb = new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
  const id = requireArg(args, "session");
  const projectId = requireArg(args, "project");
  const upload = await bb.sessions.uploads.create(id, { file: fs.createReadStream(requireArg(args, "file")) });

  const missing = upload.path.replace(/[^/]*$/, "never-uploaded.txt");
  const read = await readThrough(requireArg(args, "connect"),
    { node: upload.path, also: requireArg(args, "also"), missing });

  const oversized = await refusal(async () =>
    bb.sessions.uploads.create(id, { file: await toFile(Buffer.alloc(LIMIT + 1, 7), "big.bin") }));
  await bb.sessions.update(id, { status: "REQUEST_RELEASE", projectId });
  // A fresh connection: the server closes the one it answered 413 without reading the body.
  const fresh = new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000, httpAgent: new http.Agent({ keepAlive: false }) });
  const ended = await refusal(async () =>
    fresh.sessions.uploads.create(id, { file: await toFile(Buffer.from("late"), "late.txt") }));
  return { upload, read, oversized, ended };
}, { defaultTimeoutMs: 120000 });
