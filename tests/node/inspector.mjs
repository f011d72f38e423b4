// inspector.mjs --url WS --session ID --chrome PATH
//               (--mint BIN --key-file PEM --metrics URL | --base URL --key KEY --ca PEM)
//
// The DevTools inspector through the proxy, as a person opens a page's debuggerUrl: Puppeteer on
// the session (--url) opens a page with a marker text; a second headless Chromium (the Debian
// binary) opens `/inspector/<credential>/inspector.html?ws=<host>/inspector/<credential>/page/<id>`
// with a control credential for that page: minted (`BIN token --viewer control --page ID`), or
// with --base the page's `debuggerUrl` from the Browserbase SDK's `sessions.debug()` (a platform
// session behind the TLS gateway: the inspector Chromium trusts --ca from an NSS db in its HOME,
// as a person's browser does). Asserted here: no request of the inspector failed or answered
// >= 400, with --metrics the proxy counts the inspector's CDP socket as a client
// (wallcrawler_proxy_clients goes from 1 to 2 and back), and the marker text appears in the
// DevTools UI (its Elements panel shows the page's DOM, read through that socket). Prints
// {"ok":true,...} with how many requests loaded, the largest answer's Content-Length and the
// time from opening the URL to the marker shown; no credential.

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { requireArg, run } from "./lib.mjs";

const MARKER = "inspected-by-wallcrawler";
const PAGE = `data:text/html,<title>inspected</title><p id=m>${MARKER}</p>`;
const CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

function mint(args, id) {
  const argv = ["token", "--session-id", requireArg(args, "session"), "--viewer", "control",
    "--page", id, "--ttl", "600"];
  const env = { ...process.env, WALLCRAWLER_JWT_PRIVATE_KEY_FILE: requireArg(args, "key-file") };
  return execFileSync(requireArg(args, "mint"), argv, { env, encoding: "utf8" }).trim();
}

/** A fresh HOME whose NSS db trusts the PEM at `ca` for TLS servers (as viewer.mjs's). */
function homeTrusting(ca) {
  const home = mkdtempSync(join(tmpdir(), "wc-inspector-home-"));
  const db = join(home, ".pki", "nssdb");
  mkdirSync(db, { recursive: true });
  execFileSync("certutil", ["-d", `sql:${db}`, "-N", "--empty-password"]);
  execFileSync("certutil", ["-d", `sql:${db}`, "-A", "-t", "C,,", "-n", "wallcrawler-local-ca", "-i", ca]);
  return home;
}

/** The page's inspector URL and the credential in it: from `sessions.debug()` with --base, else
 *  minted. */
async function inspectorUrl(args, u, id) {
  if (!args.base) {
    const cred = mint(args, id);
    const at = `${u.host}/inspector/${cred}`;
    return { url: `http://${at}/inspector.html?ws=${at}/page/${id}`, cred };
  }
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  const bb = new Browserbase({ apiKey: requireArg(args, "key"), baseURL: args.base, maxRetries: 0 });
  const debug = await bb.sessions.debug(requireArg(args, "session"));
  const entry = debug.pages.find((p) => p.id === id);
  if (!entry) throw new Error(`sessions.debug() lists no page ${id}`);
  const url = entry.debuggerUrl;
  const cred = new URL(url).pathname.split("/")[2];
  return { url, cred };
}

async function clients(metrics) {
  const text = await (await fetch(metrics)).text();
  const line = text.split("\n").find((l) => l.startsWith("wallcrawler_proxy_clients "));
  return Number(line.split(" ")[1]);
}

async function waitClients(metrics, want, ms = 20000) {
  const until = Date.now() + ms;
  let seen;
  while (Date.now() < until) {
    seen = await clients(metrics);
    if (seen === want) return seen;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`wallcrawler_proxy_clients stayed ${seen}, wanted ${want}`);
}

run(async (args) => {
  const url = requireArg(args, "url");
  const metrics = args.metrics;
  const u = new URL(url);
  const { default: puppeteer } = await import("puppeteer-core");
  const session = await puppeteer.connect({ browserWSEndpoint: url, protocolTimeout: 20000 });
  const home = args.ca ? homeTrusting(args.ca) : undefined;
  const viewer = await puppeteer.launch({
    executablePath: requireArg(args, "chrome"),
    headless: true,
    args: CHROME_ARGS,
    env: home ? { ...process.env, HOME: home } : process.env,
  });
  try {
    const page = await session.newPage();
    await page.goto(PAGE);
    const s = await page.createCDPSession();
    const { targetInfo } = await s.send("Target.getTargetInfo");
    await s.detach();
    const id = targetInfo.targetId;
    const before = metrics ? await waitClients(metrics, 1) : null;
    const { url: inspector, cred } = await inspectorUrl(args, u, id);
    const hide = (s) => s.split(cred).join("<credential>");
    const failed = [];
    const vp = await viewer.newPage();
    vp.on("requestfailed", (r) => failed.push(`${hide(r.url())}: ${r.failure()?.errorText}`));
    // The browser's own favicon request goes to the origin's root, which is not the inspector's
    // (the proxy answers it 404): it is no request of the inspector's.
    const favicon = `${new URL(inspector).origin}/favicon.ico`;
    let largest = 0;
    vp.on("response", (r) => {
      if (r.status() >= 400 && r.url() !== favicon) failed.push(`${hide(r.url())}: ${r.status()}`);
      largest = Math.max(largest, Number(r.headers()["content-length"] ?? 0));
    });
    let loaded = 0;
    vp.on("requestfinished", () => loaded++);
    const started = Date.now();
    const answer = await vp.goto(inspector);
    if (answer.status() !== 200) throw new Error(`inspector.html answered ${answer.status()}`);
    const during = metrics ? await waitClients(metrics, 2) : null;
    // The page's DOM, as the Elements panel draws it (inside the frontend's shadow roots).
    await vp.waitForSelector(`::-p-text(${MARKER})`, { timeout: 20000 });
    const shownMs = Date.now() - started;
    await vp.close();
    const after = metrics ? await waitClients(metrics, 1) : null;
    const origin = new URL(inspector).origin;
    const socket = new URL(inspector).searchParams.has("wss") ? "wss" : "ws";
    return { before, during, after, loaded, largest, shownMs, origin, socket, failed };
  } finally {
    await viewer.close();
    session.disconnect();
    if (home) rmSync(home, { recursive: true, force: true });
  }
}, { defaultTimeoutMs: 60000 });
