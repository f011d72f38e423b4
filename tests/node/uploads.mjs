// uploads.mjs --base <baseURL> --key <apiKey> --project <projectId> --session <id>
//             --connect <connectUrl> --file <path> --also <path given by another upload>
// uploads.mjs --connect <connectUrl> --paths <path,...> [--digest 1]   (only what the page reads
//             of each; with --digest its size and SHA-256 instead of its bytes)
//
// Files into a session's browser with the stock Browserbase SDK and Puppeteer, as users do:
// `sessions.uploads.create(id, { file })` of --file (multipart `file`), then Puppeteer's
// `uploadFile` with the path the answer gave, and with --also (another client's upload), and
// with a path in the uploads directory nothing was uploaded to; each time the page's
// FileReader reads what the input holds. Then the refusals: a file one byte over the limit,
// and an upload after the session's release. Prints {"ok":true,...}; the Rust test decides.

import fs from "node:fs";
import http from "node:http";
import { readThrough, requireArg, run } from "./lib.mjs";

const LIMIT = 4 * 1024 * 1024;

async function refusal(f) {
  try {
    await f();
    return { status: "accepted" };
  } catch (e) {
    return { status: e.status, message: e.error?.message ?? e.message };
  }
}

run(async (args) => {
  // --connect <url> --paths <p1,p2,…> alone: only what the page reads of each path.
  // With --digest, each file's size and SHA-256 instead of its bytes (a large file's base64
  // would be a line of megabytes).
  if (args.paths) {
    const paths = Object.fromEntries(args.paths.split(",").map((p, i) => [String(i), p]));
    const read = await readThrough(requireArg(args, "connect"), paths);
    if (args.digest) {
      const { createHash } = await import("node:crypto");
      for (const r of Object.values(read)) {
        r.files = r.files.map(({ name, base64 }) => {
          const bytes = Buffer.from(base64 ?? "", "base64");
          return { name, size: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
        });
      }
    }
    return { read };
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
