// hold.mjs --url <ws endpoint> [--bearer <token>] [--goto <page URL>] [--timeout-ms N (default 120000)]
//
// Puppeteer connects (with --goto, opens a new page showing that URL and keeps it open) and
// prints {"ok":true,"connected":true,"atEpochMs":T},
// then waits until the remote side closes the socket and prints
// {"ok":true,"closed":true,"afterMs":N,"atEpochMs":T} (N = ms since the
// first line) and exits 0. Used to show that a Chrome crash closes clients
// promptly. If the timeout elapses first it prints {"ok":false,...}, exit 1.

import { bearerHeaders, emit, requireArg, run } from "./lib.mjs";

run(
  async (args) => {
    const url = requireArg(args, "url");
    const headers = bearerHeaders(args);
    const { default: puppeteer } = await import("puppeteer-core");
    const browser = await puppeteer.connect({ browserWSEndpoint: url, headers, protocolTimeout: 20000 });
    const closed = new Promise((resolve) => browser.once("disconnected", () => resolve(Date.now())));
    if (args.goto) await (await browser.newPage()).goto(args.goto);
    const connectedAt = Date.now();
    emit({ ok: true, connected: true, atEpochMs: connectedAt });
    const at = await closed;
    emit({ ok: true, closed: true, afterMs: at - connectedAt, atEpochMs: at });
    return undefined;
  },
  { defaultTimeoutMs: 120000 },
);
