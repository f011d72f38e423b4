// logs.mjs --base <baseURL> --key <apiKey> --project <projectId> --scenario <name>
//
// A session's log on the local platform: the stock Browserbase SDK creates the session and
// reads `sessions.logs.list(id)`, Puppeteer drives it (pages served on 127.0.0.1).
//   logged:   goto /first; while the session runs, polls the log until it holds that
//             Page.navigate; then goto /second, a Runtime.evaluate through a CDP session,
//             disconnect, release, wait for endedAt, and read the log again.
//   unlogged: browserSettings.logSession false; goto /first, release, wait for endedAt, read.
// Prints {"ok":true,...}: the session's times, its token, and the log entries (whole), for the
// Rust test to judge.
import { requireArg, run, serveTwoPages, until } from "./lib.mjs";

async function client(args) {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  return new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
}

const pages = () => serveTwoPages((path) => `<title>${path}</title><script>console.log("on ${path}")</script>`);

const navigationTo = (logs, url) =>
  logs.find((e) => e.method === "Page.navigate" && e.request?.params?.url === url);

async function ended(bb, projectId, id) {
  await bb.sessions.update(id, { status: "REQUEST_RELEASE", projectId });
  return until("the session's end", 30000, async () => {
    const s = await bb.sessions.retrieve(id);
    return s.endedAt ? s : undefined;
  });
}

async function logged(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const urls = await pages();
  const session = await bb.sessions.create({ projectId });
  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.connect({ browserWSEndpoint: session.connectUrl });
  const page = (await browser.pages())[0] ?? (await browser.newPage());
  await page.goto(urls.first);
  // While the session runs: the navigation is already in the log.
  const running = await until("the first navigation in the log", 10000, async () => {
    const logs = await bb.sessions.logs.list(session.id);
    return navigationTo(logs, urls.first) ? logs : undefined;
  });
  await page.goto(urls.second);
  const cdp = await page.createCDPSession();
  const evaluated = await cdp.send("Runtime.evaluate", { expression: "6 * 7", returnByValue: true });
  await browser.disconnect();
  const end = await ended(bb, projectId, session.id);
  const logs = await bb.sessions.logs.list(session.id);
  urls.close();
  return {
    sessionId: session.id,
    createdAt: session.createdAt,
    endedAt: end.endedAt,
    token: session.signingKey,
    connectUrl: session.connectUrl,
    first: urls.first,
    second: urls.second,
    evaluated: evaluated.result.value,
    runningMethods: running.map((e) => e.method),
    logs,
  };
}

async function unlogged(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const urls = await pages();
  const session = await bb.sessions.create({ projectId, browserSettings: { logSession: false } });
  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.connect({ browserWSEndpoint: session.connectUrl });
  const page = (await browser.pages())[0] ?? (await browser.newPage());
  await page.goto(urls.first);
  await browser.disconnect();
  await ended(bb, projectId, session.id);
  const logs = await bb.sessions.logs.list(session.id);
  urls.close();
  return { sessionId: session.id, first: urls.first, logs };
}

const SCENARIOS = { logged, unlogged };

run(async (args) => {
  const scenario = SCENARIOS[requireArg(args, "scenario")];
  if (!scenario) throw new Error(`unknown scenario: ${args.scenario}`);
  return scenario(args);
}, { defaultTimeoutMs: 120000 });
