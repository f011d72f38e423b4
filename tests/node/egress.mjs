// egress.mjs --base <baseURL> --key <apiKey> --project <projectId> --scenario <name>
//
// A session's egress on the local platform, driven as users do: the stock Browserbase SDK
// creates the session, Playwright (connectOverCDP) drives it. Pages are served on 127.0.0.1
// under names of their own (`a.test`, `b.test`, …: no resolver knows them, so only a proxy —
// tests/node/proxies.mjs maps `.test` to 127.0.0.1 — can reach them, and a direct connection
// cannot: a name that loads went through a proxy).
//   proxies:   an HTTP proxy (Basic) for a.test and a SOCKS5 proxy (user/password) for b.test,
//              `type: "none"` for 127.0.0.1; each page loads, each proxy saw only its host and
//              its user; after the release, the session's proxyBytes beside what the proxies
//              carried (a page of PAGE_KIB KiB on each).
//   wrong-password: the HTTP proxy refuses the credentials: the page does not load and the
//              site's server saw no request; the password (PASSWORD) is in no API answer.
//   allowed-domains: allowedDomains ["a.test"], every host through the HTTP proxy: a.test
//              loads, b.test fails (net::ERR_BLOCKED_BY_CLIENT) and never reaches the proxy.
//   webrtc:    a page's ICE gathering against a STUN server on 127.0.0.1 (UDP), with a proxy
//              and without: the STUN packets each time.
//   loopback:  a page on 127.0.0.1 (direct): loads or not (the platform's EGRESS_ALLOW decides).
//   managed:   `proxies: true` (and a country's): the page through the platform's managed
//              pool, whose proxy (MANAGED_PROXY_PORT, in a file the test wrote) is started here.
//   refusals:  malformed proxies and allowedDomains: each create's status and message.
//   block-ads: a page on a.test with an ad network's script (pagead2.googlesyndication.com)
//              and pixel (g.doubleclick.net), every host through the HTTP proxy, whose
//              stand-in (a server on 127.0.0.1) answers the ad hosts: never the network.
//              Without blockAds and with: the hosts the proxy was asked for, what the
//              stand-in served, and whether the page loaded (its title) with or without them.
// Prints {"ok":true,...} with what it observed.
import http from "node:http";
import dgram from "node:dgram";
import { requireArg, run } from "./lib.mjs";
import { httpProxy, socks5Proxy } from "./proxies.mjs";

const PAGE_KIB = Number(process.env.PAGE_KIB ?? 300);
const PASSWORD = process.env.PASSWORD ?? "pw-3c1f9e-not-in-any-answer";

async function client(args) {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  return new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
}

/** A site on 127.0.0.1 answering every name with a page of PAGE_KIB KiB; counts requests. */
async function site() {
  const s = { hits: [], port: 0 };
  const server = http.createServer((req, res) => {
    s.hits.push(req.headers.host);
    res.writeHead(200, { "content-type": "text/html", "cache-control": "no-store" });
    res.end(`<title>${req.headers.host.split(":")[0]}</title><!--${"x".repeat(PAGE_KIB * 1024)}-->`);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  s.port = server.address().port;
  s.close = () => server.close();
  return s;
}

async function waitFor(bb, id, pred, what) {
  const deadline = Date.now() + 40000;
  for (;;) {
    const s = await bb.sessions.retrieve(id);
    if (pred(s)) return s;
    if (Date.now() > deadline) throw new Error(`session ${id} never became ${what}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Opens each URL in a new page of the session; {url: title | "error: <net::…>"}. */
async function visit(connectUrl, urls, extra) {
  const { chromium } = await import("playwright-core");
  const browser = await chromium.connectOverCDP(connectUrl, { timeout: 20000 });
  try {
    const page = await browser.contexts()[0].newPage();
    const out = {};
    for (const u of urls) {
      try {
        await page.goto(u, { timeout: 15000 });
        out[u] = await page.title();
      } catch (e) {
        out[u] = `error: ${(e.message.match(/net::[A-Z_]+/) ?? [e.message.split("\n")[0]])[0]}`;
      }
    }
    if (extra) out.extra = await extra(page);
    await page.close();
    return out;
  } finally {
    await browser.close();
  }
}

async function release(bb, projectId, id) {
  await bb.sessions.update(id, { status: "REQUEST_RELEASE", projectId });
  return waitFor(bb, id, (s) => s.endedAt, "ended");
}

async function proxies(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const pages = await site();
  const hp = await httpProxy({ user: "alice", pass: PASSWORD });
  const sp = await socks5Proxy({ user: "bob", pass: PASSWORD });
  const session = await bb.sessions.create({
    projectId,
    proxies: [
      { type: "external", server: hp.url, username: "alice", password: PASSWORD, domainPattern: "a\\.test" },
      { type: "external", server: sp.url, username: "bob", password: PASSWORD, domainPattern: "b\\.test" },
      { type: "none", domainPattern: "127\\.0\\.0\\.1" },
    ],
  });
  const p = pages.port;
  const titles = await visit(session.connectUrl, [`http://a.test:${p}/`, `http://b.test:${p}/`, `http://127.0.0.1:${p}/`]);
  const answers = [JSON.stringify(session), JSON.stringify(await bb.sessions.retrieve(session.id))];
  const ended = await release(bb, projectId, session.id);
  answers.push(JSON.stringify(ended), JSON.stringify(await bb.sessions.list()));
  return {
    sessionId: session.id,
    titles,
    httpProxy: hp.log.map((l) => `${l.host} ${l.user} ${l.ok}`),
    socksProxy: sp.log.map((l) => `${l.host} ${l.user} ${l.ok}`),
    proxiedBytesCarried: hp.bytes + sp.bytes,
    proxyBytes: ended.proxyBytes,
    status: ended.status,
    passwordInAnswers: answers.some((a) => a.includes(PASSWORD)),
    siteHits: pages.hits,
  };
}

async function wrongPassword(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const pages = await site();
  const hp = await httpProxy({ user: "alice", pass: "the-right-one" });
  const session = await bb.sessions.create({
    projectId,
    proxies: [{ type: "external", server: hp.url, username: "alice", password: PASSWORD }],
  });
  const titles = await visit(session.connectUrl, [`http://127.0.0.1:${pages.port}/`]);
  const answers = [JSON.stringify(session), JSON.stringify(await bb.sessions.retrieve(session.id)), JSON.stringify(await bb.sessions.debug(session.id))];
  const ended = await release(bb, projectId, session.id);
  answers.push(JSON.stringify(ended));
  return {
    sessionId: session.id,
    titles,
    httpProxy: hp.log.map((l) => `${l.host} ${l.user} ${l.ok}`),
    siteHits: pages.hits.length,
    proxyBytes: ended.proxyBytes,
    passwordInAnswers: answers.some((a) => a.includes(PASSWORD)),
  };
}

async function allowedDomains(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const pages = await site();
  const hp = await httpProxy({ user: "alice", pass: PASSWORD });
  const session = await bb.sessions.create({
    projectId,
    proxies: [{ type: "external", server: hp.url, username: "alice", password: PASSWORD }],
    browserSettings: { allowedDomains: ["a.test"] },
  });
  const p = pages.port;
  const titles = await visit(session.connectUrl, [`http://a.test:${p}/`, `http://www.a.test:${p}/`, `http://b.test:${p}/`]);
  await release(bb, projectId, session.id);
  return { titles, proxyAsked: hp.log.map((l) => l.host), siteHits: pages.hits };
}

/** ICE gathering against a STUN server on 127.0.0.1 from a page of the session; the packets. */
async function stunPackets(connectUrl, pageUrl) {
  const udp = dgram.createSocket("udp4");
  let packets = 0;
  udp.on("message", () => { packets += 1; });
  await new Promise((r) => udp.bind(0, "127.0.0.1", r));
  const stun = udp.address().port;
  const out = await visit(connectUrl, [pageUrl], (page) => page.evaluate(async (port) => {
    const pc = new RTCPeerConnection({ iceServers: [{ urls: `stun:127.0.0.1:${port}` }] });
    pc.createDataChannel("probe");
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise((r) => {
      pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === "complete") r(); };
      setTimeout(r, 8000);
    });
    pc.close();
    return pc.iceGatheringState;
  }, stun));
  udp.close();
  return { packets, loaded: out[pageUrl] };
}

async function webrtc(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const pages = await site();
  const hp = await httpProxy({ user: "alice", pass: PASSWORD });
  const plain = await bb.sessions.create({ projectId });
  const without = await stunPackets(plain.connectUrl, `http://127.0.0.1:${pages.port}/`);
  await release(bb, projectId, plain.id);
  const proxied = await bb.sessions.create({
    projectId,
    proxies: [{ type: "external", server: hp.url, username: "alice", password: PASSWORD }],
  });
  const withProxy = await stunPackets(proxied.connectUrl, `http://a.test:${pages.port}/`);
  await release(bb, projectId, proxied.id);
  return { withoutProxy: without, withProxy };
}

async function loopback(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const pages = await site();
  const session = await bb.sessions.create({ projectId });
  const titles = await visit(session.connectUrl, [`http://127.0.0.1:${pages.port}/`]);
  await release(bb, projectId, session.id);
  return { titles, siteHits: pages.hits.length };
}

async function managed(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const pages = await site();
  const port = Number(process.env.MANAGED_PROXY_PORT);
  const hp = await httpProxy({ user: "pool-user", pass: PASSWORD, port });
  const out = {};
  for (const [name, proxies] of [["true", true], ["country", [{ type: "browserbase", geolocation: { country: "DE" } }]]]) {
    const session = await bb.sessions.create({ projectId, proxies });
    out[name] = await visit(session.connectUrl, [`http://a.test:${pages.port}/`]);
    await release(bb, projectId, session.id);
  }
  out.proxyAsked = hp.log.map((l) => `${l.host} ${l.user} ${l.ok}`);
  try {
    await bb.sessions.create({ projectId, proxies: [{ type: "browserbase", geolocation: { country: "FR" } }] });
    out.unknownCountry = "created";
  } catch (e) {
    out.unknownCountry = `${e.status} ${e.error?.message ?? e.message}`;
  }
  return out;
}

async function refusals(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const cases = {
    "proxies-true": { proxies: true },
    "proxies-string": { proxies: "yes" },
    "unknown-type": { proxies: [{ type: "residential", server: "http://p.test:1" }] },
    "no-server": { proxies: [{ type: "external" }] },
    "ftp": { proxies: [{ type: "external", server: "ftp://p.test:21", username: "u", password: PASSWORD }] },
    "not-a-url": { proxies: [{ type: "external", server: "not a url", password: PASSWORD, username: "u" }] },
    "bad-pattern": { proxies: [{ type: "external", server: "http://p.test:1", domainPattern: "(" }] },
    "long-pattern": { proxies: [{ type: "external", server: "http://p.test:1", domainPattern: "a".repeat(300) }] },
    "long-password": { proxies: [{ type: "external", server: "http://p.test:1", username: "u", password: "p".repeat(300) }] },
    "too-many": { proxies: Array.from({ length: 17 }, () => ({ type: "none" })) },
    "allowed-domain-url": { browserSettings: { allowedDomains: ["https://example.com/"] } },
  };
  const out = {};
  for (const [name, body] of Object.entries(cases)) {
    try {
      const s = await bb.sessions.create({ projectId, ...body });
      out[name] = `created ${s.id}`;
      await bb.sessions.update(s.id, { status: "REQUEST_RELEASE", projectId });
    } catch (e) {
      out[name] = `${e.status} ${e.error?.message ?? e.message}`;
    }
  }
  return { refusals: out, passwordInAnswers: JSON.stringify(out).includes(PASSWORD) };
}

/** A page on a.test with an ad script and pixel; the proxy (all hosts) and its stand-in for
 *  the ad hosts. One session without blockAds, one with. */
async function blockAds(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const ads = { hits: [] };
  const standIn = http.createServer((req, res) => {
    ads.hits.push(`${req.headers.host}${req.url}`);
    if (req.url.endsWith(".js")) {
      res.writeHead(200, { "content-type": "text/javascript", "cache-control": "no-store" });
      res.end("window.adRan = true;");
    } else {
      res.writeHead(200, { "content-type": "image/gif", "cache-control": "no-store" });
      res.end(Buffer.from("R0lGODlhAQABAAAAACH5BAEAAAAALAAAAAABAAEAAAIBAAA=", "base64"));
    }
  });
  await new Promise((r) => standIn.listen(0, "127.0.0.1", r));
  const pages = { hits: [] };
  const server = http.createServer((req, res) => {
    pages.hits.push(req.headers.host);
    res.writeHead(200, { "content-type": "text/html", "cache-control": "no-store" });
    res.end(`<title>with ads</title><p>the page</p>
<script src="http://pagead2.googlesyndication.com/x.js"></script>
<img id="pixel" src="http://g.doubleclick.net/p.gif">`);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const hp = await httpProxy({ user: "alice", pass: PASSWORD, standIn: standIn.address().port });
  const out = {};
  for (const [name, browserSettings] of [["without", {}], ["with", { blockAds: true }]]) {
    const asked = hp.log.length;
    const served = ads.hits.length;
    const session = await bb.sessions.create({
      projectId,
      proxies: [{ type: "external", server: hp.url, username: "alice", password: PASSWORD }],
      browserSettings,
    });
    const url = `http://a.test:${server.address().port}/`;
    const seen = await visit(session.connectUrl, [url], (page) => page.evaluate(() => ({
      adScriptRan: window.adRan === true,
      pixelLoaded: document.getElementById("pixel").naturalWidth > 0,
    })));
    await release(bb, projectId, session.id);
    out[name] = {
      title: seen[url],
      ...seen.extra,
      proxyAsked: [...new Set(hp.log.slice(asked).map((l) => l.host))].sort(),
      standInServed: ads.hits.slice(served),
    };
  }
  standIn.close();
  server.close();
  hp.close();
  return { ...out, pageHits: pages.hits.length };
}

const SCENARIOS = { "block-ads": blockAds, proxies, "wrong-password": wrongPassword, "allowed-domains": allowedDomains, webrtc, loopback, managed, refusals };

run(async (args) => {
  const scenario = SCENARIOS[requireArg(args, "scenario")];
  if (!scenario) throw new Error(`unknown scenario: ${args.scenario}`);
  return scenario(args);
}, { defaultTimeoutMs: 150000 });
