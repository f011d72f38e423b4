// Shared plumbing for the client scripts the Rust integration tests spawn.
//
// Contract: every script prints JSON lines on stdout and nothing else there
// (libraries' console output is diverted to stderr). The last line is the
// result: {"ok":true,...} with exit 0, or {"ok":false,"error":"..."} with
// exit 1. A hard timeout (default 30 s, --timeout-ms N) guarantees the
// script never hangs.

import { writeSync } from "node:fs";

// Keep stdout for our JSON lines only.
for (const name of ["log", "info", "debug", "warn", "trace", "dir"]) {
  console[name] = (...args) => console.error(...args);
}

/** A tiny page that never touches the network. */
export const DATA_URL = "data:text/html,<title>wallcrawler</title><h1>hi</h1>";

/**
 * Parses `--name value` pairs and bare `--flag`s.
 * @returns {Record<string,string|true>}
 */
export function parseArgs(argv = process.argv.slice(2)) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error(`unexpected argument: ${a}`);
    const eq = a.indexOf("=");
    if (eq > 0) {
      out[a.slice(2, eq)] = a.slice(eq + 1);
    } else if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
      out[a.slice(2)] = argv[++i];
    } else {
      out[a.slice(2)] = true;
    }
  }
  return out;
}

/** Writes one JSON line synchronously (so it is flushed even if we exit right after). */
export function emit(obj) {
  writeSync(1, JSON.stringify(obj) + "\n");
}

/** The --bearer token as a headers object, or undefined. */
export function bearerHeaders(args) {
  const t = args.bearer;
  if (t === undefined) return undefined;
  if (t === true || t === "") throw new Error("--bearer needs a token");
  return { Authorization: `Bearer ${t}` };
}

export function requireArg(args, name) {
  const v = args[name];
  if (v === undefined || v === true || v === "") throw new Error(`missing --${name}`);
  return v;
}

function errorText(e) {
  let s;
  if (e instanceof Error) {
    s = e.message || String(e);
    if (e.cause) s += ` (cause: ${errorText(e.cause)})`;
  } else if (e && typeof e === "object") {
    // e.g. a WebSocket ErrorEvent: {type, message, error}
    s = e.message || (e.error && errorText(e.error)) || safeJson(e);
  } else {
    s = String(e);
  }
  // Playwright decorates messages with ANSI colours.
  return s.replace(/\u001b\[[0-9;]*m/g, "");
}

function safeJson(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

/**
 * Runs `main(args)` under a hard timeout. `main` returns the success object
 * (printed with ok:true) or undefined when it printed its own final line.
 */
export function run(main, { defaultTimeoutMs = 30000 } = {}) {
  let args;
  try {
    args = parseArgs();
  } catch (e) {
    emit({ ok: false, error: errorText(e) });
    process.exit(1);
  }
  const timeoutMs = args["timeout-ms"] !== undefined ? Number(args["timeout-ms"]) : defaultTimeoutMs;
  let done = false;
  const fail = (msg) => {
    if (done) return;
    done = true;
    emit({ ok: false, error: msg });
    process.exit(1);
  };
  const timer = setTimeout(() => fail(`timeout after ${timeoutMs} ms`), timeoutMs);
  process.on("uncaughtException", (e) => fail(`uncaught: ${errorText(e)}`));
  process.on("unhandledRejection", (e) => fail(`unhandled rejection: ${errorText(e)}`));
  Promise.resolve()
    .then(() => main(args))
    .then(
      (result) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        if (result !== undefined) emit({ ok: true, ...result });
        // Exit explicitly: a library may keep a handle open.
        process.exit(0);
      },
      (e) => fail(errorText(e)),
    );
}

/**
 * Serves two pages on 127.0.0.1 (a port of its own), `/first` and `/second`, each the HTML
 * `body(path)` makes. Returns their URLs and `close()`.
 */
export async function serveTwoPages(body) {
  const http = await import("node:http");
  const server = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(body(req.url));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${server.address().port}`;
  return { first: `${base}/first`, second: `${base}/second`, close: () => server.close() };
}

/** Calls `probe` until it returns a value (not undefined), at most `ms`; names `what` if not. */
export async function until(what, ms, probe) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Serves a page on 127.0.0.1 (a port of its own): title "served", `window.fromPage` = 41.
 * Returns its `url` and `close()`.
 */
export async function servePage() {
  const http = await import("node:http");
  const server = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<!doctype html><title>served</title><script>window.fromPage = 41</script><h1>hi</h1>");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}/`, close: () => server.close() };
}

/**
 * The mark the tests' extension's content script sets on a page
 * (`document.documentElement.dataset.wallcrawler`), read with Puppeteer in a new page at `url`
 * over `connectUrl`; null when none appears within two seconds of the load.
 */
export async function markOn(connectUrl, url) {
  const { default: puppeteer } = await import("puppeteer-core");
  const browser = await puppeteer.connect({ browserWSEndpoint: connectUrl });
  try {
    const page = await browser.newPage();
    await page.goto(url, { waitUntil: "load" });
    const mark = await page
      .waitForFunction(() => document.documentElement.dataset.wallcrawler, { timeout: 2000 })
      .then((h) => h.jsonValue())
      .catch(() => null);
    await page.close();
    return mark;
  } finally {
    await browser.disconnect();
  }
}

/** A page with one file input (`#f`). */
export const FILE_INPUT_PAGE = "data:text/html,<input type=file id=f>";

/** The page's file input's files, read by FileReader: [{name, base64}]. */
export const READ_FILES = `(async () => {
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

/** Puppeteer on `url` sets each of `paths` on a file input in turn: what the page read. */
export async function readThrough(url, paths) {
  const { default: puppeteer } = await import("puppeteer-core");
  const browser = await puppeteer.connect({ browserWSEndpoint: url, defaultViewport: null });
  const page = await browser.newPage();
  await page.goto(FILE_INPUT_PAGE);
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
