// recordings.mjs --base <baseURL> --key <apiKey> --project <projectId> --scenario <name>
//                [--out <dir>] [--foreign <sessionId>]
//
// A session's recording on the local platform: the stock Browserbase SDK creates the session
// and reads `sessions.replays`, `sessions.recording.downloads` and `sessions.recording`;
// Puppeteer shows a red page served on 127.0.0.1.
//   recorded:   goto /red; polls replays.retrieve while the session runs until the page has
//               3 s of video stored; release, wait for endedAt; retrievePage's playlist, its
//               segments fetched by their URLs into <out>/replay.ts; downloads.create, list
//               polled until COMPLETED, the MP4 fetched into <out>/download.mp4; the 410 of
//               recording.retrieve; hostile page ids and the --foreign session (another
//               project's) refused; a segment URL with a altered signature refused.
//   no-encoder: (serve with an FFMPEG_PATH that is no program) a session recorded by default:
//             its replays and the notes of its log.
//   unrecorded: browserSettings.recordSession false; goto /red (painted), release, wait for
//               endedAt, replays.retrieve.
// Prints {"ok":true,...} for the Rust test to judge (it decodes the files with ffmpeg).
import http from "node:http";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { requireArg, run, until } from "./lib.mjs";

async function client(args) {
  const { default: Browserbase } = await import("@browserbasehq/sdk");
  return new Browserbase({ apiKey: requireArg(args, "key"), baseURL: requireArg(args, "base"), maxRetries: 0, timeout: 60000 });
}

async function redPage() {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(`<!doctype html><title>red</title><body style="margin:0;background:#f00"></body>`);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}/red`, close: () => server.close() };
}

async function ended(bb, projectId, id) {
  await bb.sessions.update(id, { status: "REQUEST_RELEASE", projectId });
  return until("the session's end", 30000, async () => {
    const s = await bb.sessions.retrieve(id);
    return s.endedAt ? s : undefined;
  });
}

/** The status (and body) an SDK call is refused with; `null` when it succeeds. */
async function refusal(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return { status: e.status ?? null, error: e.error ?? String(e) };
  }
}

async function showRed(bb, projectId, settings) {
  const page0 = await redPage();
  const session = await bb.sessions.create({ projectId, ...settings });
  const puppeteer = (await import("puppeteer-core")).default;
  // The page keeps the browser's size (Puppeteer would make it 800x600, and the video, sized
  // from the page's first frame, would show it letterboxed).
  const browser = await puppeteer.connect({ browserWSEndpoint: session.connectUrl, defaultViewport: null });
  const page = (await browser.pages())[0] ?? (await browser.newPage());
  await page.goto(page0.url);
  // Painted: two animation frames after the load.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  return { session, browser, page0 };
}

async function fetchBytes(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${new URL(url).pathname} answered ${res.status}`);
  return Buffer.from(await res.arrayBuffer());
}

async function downloads(bb, id, out) {
  const created = await bb.sessions.recording.downloads.create(id);
  const done = await until("the MP4 downloads", 60000, async () => {
    const l = await bb.sessions.recording.downloads.list(id);
    return l.downloads.length > 0 && l.downloads.every((d) => d.status === "COMPLETED") ? l : undefined;
  });
  const mp4 = join(out, "download.mp4");
  writeFileSync(mp4, await fetchBytes(done.downloads[0].downloadUrl));
  return { created: created.downloads, listed: done.downloads, mp4 };
}

async function hostile(args, bb, id, segmentUrl) {
  const base = requireArg(args, "base");
  const headers = { "X-BB-API-Key": requireArg(args, "key") };
  const raw = async (path) => (await fetch(`${base}${path}`, { headers })).status;
  const foreign = requireArg(args, "foreign");
  const altered = new URL(segmentUrl);
  const sig = altered.searchParams.get("signature") ?? "";
  altered.searchParams.set("signature", (sig[0] === "a" ? "b" : "a") + sig.slice(1));
  return {
    dotdot: await raw(`/v1/sessions/${id}/replays/..%2F0`),
    leadingZero: await raw(`/v1/sessions/${id}/replays/00`),
    notRecorded: await raw(`/v1/sessions/${id}/replays/7`),
    foreignReplays: await refusal(() => bb.sessions.replays.retrieve(foreign)),
    foreignPage: await refusal(() => bb.sessions.replays.retrievePage(foreign, "0")),
    foreignDownloads: await refusal(() => bb.sessions.recording.downloads.create(foreign)),
    foreignRecording: await refusal(() => bb.sessions.recording.retrieve(foreign)),
    alteredSignature: (await fetch(altered)).status,
  };
}

async function recorded(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const out = requireArg(args, "out");
  const { session, browser, page0 } = await showRed(bb, projectId, {});
  // While the session runs: the page is listed, with 3 s of video stored.
  const running = await until("3 s of the page's video", 30000, async () => {
    const r = await bb.sessions.replays.retrieve(session.id);
    const p = r.pages[0];
    return p && p.endTimeMs - p.startTimeMs >= 3000 ? r : undefined;
  });
  await browser.disconnect();
  const end = await ended(bb, projectId, session.id);
  page0.close();
  const replays = await bb.sessions.replays.retrieve(session.id);
  const res = await bb.sessions.replays.retrievePage(session.id, replays.pages[0].pageId);
  const playlist = await res.text();
  const urls = playlist.split("\n").filter((l) => l && !l.startsWith("#"));
  const segments = [];
  for (const u of urls) segments.push(await fetchBytes(u));
  const ts = join(out, "replay.ts");
  writeFileSync(ts, Buffer.concat(segments));
  const gone = await refusal(() => bb.sessions.recording.retrieve(session.id));
  return {
    sessionId: session.id,
    createdAt: session.createdAt,
    endedAt: end.endedAt,
    url: page0.url,
    running,
    replays,
    contentType: res.headers.get("content-type"),
    playlist,
    ts,
    downloads: await downloads(bb, session.id, out),
    gone,
    hostile: await hostile(args, bb, session.id, urls[0]),
  };
}

async function unrecorded(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const { session, browser, page0 } = await showRed(bb, projectId, {
    browserSettings: { recordSession: false },
  });
  await browser.disconnect();
  await ended(bb, projectId, session.id);
  page0.close();
  const replays = await bb.sessions.replays.retrieve(session.id);
  const downloads = await bb.sessions.recording.downloads.list(session.id);
  return { sessionId: session.id, replays, downloads };
}

/** A session recorded by default on a platform whose encoder cannot start (FFMPEG_PATH). */
async function noEncoder(args) {
  const bb = await client(args);
  const projectId = requireArg(args, "project");
  const { session, browser, page0 } = await showRed(bb, projectId, {});
  await browser.disconnect();
  await ended(bb, projectId, session.id);
  page0.close();
  const replays = await bb.sessions.replays.retrieve(session.id);
  const logs = await bb.sessions.logs.list(session.id);
  const notes = logs.filter((e) => e.method === "Wallcrawler.note").map((e) => e.response?.result?.message);
  return { sessionId: session.id, replays, notes };
}

const SCENARIOS = { recorded, unrecorded, "no-encoder": noEncoder };

run(async (args) => {
  const scenario = SCENARIOS[requireArg(args, "scenario")];
  if (!scenario) throw new Error(`unknown scenario: ${args.scenario}`);
  return scenario(args);
}, { defaultTimeoutMs: 180000 });
