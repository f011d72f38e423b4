// browser-settings.mjs --base <baseURL> --key <apiKey> --project <projectId> --scenario <name>
//
// The browser a session asks for, on the local platform: the stock Browserbase SDK creates the
// session, Playwright (connectOverCDP) reads what its pages see; a test server on 127.0.0.1
// records the request headers.
//   page:        browserSettings.viewport 1288x711 and fingerprint.locales ["de-DE"]: on the
//                client's first page and on a new page, innerWidth/innerHeight,
//                navigator.language(s), userAgent, userAgentData.brands, webdriver, and the
//                User-Agent, sec-ch-ua and Accept-Language headers the server saw.
//   plain:       the same readings with no settings (headless tells must be gone anyway).
//   certificates: a self-signed https page on 127.0.0.1: without ignoreCertificateErrors and with.
//   unsupported: solveCaptchas and an unknown field (201, named in x-wallcrawler-unsupported);
//                a malformed viewport (400).
// Prints {"ok":true,...} with what it observed.
import http from "node:http";
import https from "node:https";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { requireArg, run } from "./lib.mjs";

async function client(args) {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  return new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
}

async function recorder(tls) {
  const seen = [];
  const handler = (req, res) => {
    seen.push({ ua: req.headers["user-agent"], secChUa: req.headers["sec-ch-ua"], acceptLanguage: req.headers["accept-language"] });
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<title>page</title>");
  };
  const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { seen, url: `${tls ? "https" : "http"}://127.0.0.1:${server.address().port}/`, close: () => server.close() };
}

const reading = (page) => page.evaluate(() => ({
  width: innerWidth,
  height: innerHeight,
  language: navigator.language,
  languages: navigator.languages,
  userAgent: navigator.userAgent,
  brands: navigator.userAgentData?.brands?.map((b) => b.brand) ?? null,
  webdriver: navigator.webdriver,
}));

async function pages(session, url) {
  const { chromium } = await import("playwright-core");
  const browser = await chromium.connectOverCDP(session.connectUrl, { timeout: 20000 });
  try {
    const context = browser.contexts()[0];
    const first = context.pages()[0] ?? (await context.newPage());
    await first.goto(url);
    const onFirst = await reading(first);
    const fresh = await context.newPage();
    await fresh.goto(url);
    const onNew = await reading(fresh);
    await fresh.close();
    return { first: onFirst, new: onNew };
  } finally {
    await browser.close();
  }
}

async function release(bb, projectId, id) {
  await bb.sessions.update(id, { status: "REQUEST_RELEASE", projectId });
}

async function readings(args, browserSettings) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const server = await recorder();
  const session = await bb.sessions.create({ projectId, ...(browserSettings ? { browserSettings } : {}) });
  const seen = await pages(session, server.url);
  await release(bb, projectId, session.id);
  server.close();
  return { ...seen, headers: server.seen[0] };
}

const page = (args) => readings(args, { viewport: { width: 1288, height: 711 }, fingerprint: { locales: ["de-DE"] } });
const plain = (args) => readings(args, null);

async function certificates(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "self-signed-"));
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", `${dir}/k.pem`, "-out", `${dir}/c.pem`, "-subj", "/CN=127.0.0.1", "-days", "2"], { stdio: "ignore" });
  const server = await recorder({ key: fs.readFileSync(`${dir}/k.pem`), cert: fs.readFileSync(`${dir}/c.pem`) });
  const out = {};
  for (const [name, browserSettings] of [["default", undefined], ["ignoring", { ignoreCertificateErrors: true }]]) {
    const session = await bb.sessions.create({ projectId, ...(browserSettings ? { browserSettings } : {}) });
    const { chromium } = await import("playwright-core");
    const browser = await chromium.connectOverCDP(session.connectUrl, { timeout: 20000 });
    const p = await browser.contexts()[0].newPage();
    try {
      await p.goto(server.url, { timeout: 15000 });
      out[name] = await p.title();
    } catch (e) {
      out[name] = `error: ${(e.message.match(/net::[A-Z_]+/) ?? [e.message.split("\n")[0]])[0]}`;
    }
    await browser.close();
    await release(bb, projectId, session.id);
  }
  server.close();
  fs.rmSync(dir, { recursive: true, force: true });
  return out;
}

async function unsupported(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const { data, response } = await bb.sessions
    .create({ projectId, browserSettings: { solveCaptchas: true }, fooBar: 1 })
    .withResponse();
  const header = response.headers.get("x-wallcrawler-unsupported");
  await release(bb, projectId, data.id);
  let malformed;
  try {
    await bb.sessions.create({ projectId, browserSettings: { viewport: { width: 0, height: 711 } } });
    malformed = "created";
  } catch (e) {
    malformed = `${e.status} ${e.error?.message ?? e.message}`;
  }
  return { status: data.status, header, malformed };
}

const SCENARIOS = { page, plain, certificates, unsupported };

run(async (args) => {
  const scenario = SCENARIOS[requireArg(args, "scenario")];
  if (!scenario) throw new Error(`unknown scenario: ${args.scenario}`);
  return scenario(args);
}, { defaultTimeoutMs: 120000 });
