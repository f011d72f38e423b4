// recording-bench.mjs --base <baseURL> --key <apiKey> --project <projectId>
//                     --page idle|anim --record true|false --secs N [--warmup-secs W]
//
// One session of scripts/bench/recording.sh: the stock SDK creates it (recordSession as
// asked), Puppeteer shows a page (idle: a still page; anim: a box moving and changing colour
// every 33 ms, 30 changes a second), waits W seconds, prints {"phase":"start"}, holds the page N
// seconds, prints {"phase":"end"} (the shell script reads /proc at both lines), releases the
// session and waits for its end, then prints {"ok":true,sessionId,pages} (the replays' pages).
import { emit, requireArg, run, until } from "./lib.mjs";

const PAGES = {
  idle: "data:text/html,<title>idle</title><body style='margin:0;background:%23f00'><h1>still</h1>",
  anim:
    "data:text/html,<title>anim</title><body style='margin:0'><div id=b style='position:absolute;" +
    "width:200px;height:200px'></div><script>let i=0;setInterval(()=>{i++;const b=document." +
    "getElementById('b');b.style.left=(i*7%25600)+'px';b.style.top=(i*3%25400)+'px';b.style." +
    "background='hsl('+(i*11%25360)+',90%25,50%25)'},33)</script>",
};

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

run(async (args) => {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  const bb = new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
  const projectId = requireArg(args, "project");
  const url = PAGES[requireArg(args, "page")];
  if (!url) throw new Error(`unknown page: ${args.page}`);
  const record = requireArg(args, "record") === "true";
  const secs = Number(requireArg(args, "secs"));
  const warmup = Number(args["warmup-secs"] ?? 3);
  const session = await bb.sessions.create({ projectId, browserSettings: { recordSession: record } });
  const puppeteer = (await import("puppeteer-core")).default;
  const browser = await puppeteer.connect({ browserWSEndpoint: session.connectUrl, defaultViewport: null });
  const page = (await browser.pages())[0] ?? (await browser.newPage());
  await page.goto(url);
  // The hold is what is measured, not a wait for something to happen.
  await pause(warmup * 1000);
  emit({ phase: "start", sessionId: session.id });
  await pause(secs * 1000);
  emit({ phase: "end" });
  await browser.disconnect();
  await bb.sessions.update(session.id, { status: "REQUEST_RELEASE", projectId });
  await until("the session's end", 30000, async () => {
    const s = await bb.sessions.retrieve(session.id);
    return s.endedAt ? s : undefined;
  });
  const replays = await bb.sessions.replays.retrieve(session.id);
  return { sessionId: session.id, pages: replays.pages };
}, { defaultTimeoutMs: 300000 });
