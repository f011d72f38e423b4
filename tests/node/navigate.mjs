// navigate.mjs --url <ws endpoint> --targets <url|url|...> [--timeout-ms N]
//
// Connects with puppeteer-core, opens one page and navigates it to each target in turn,
// recording how each navigation ended: "ok" or Chrome's net error
// (e.g. "net::ERR_BLOCKED_BY_ADMINISTRATOR"). Disconnects without closing the browser.
// Prints {"ok":true,"results":{"<url>":"ok"|"net::ERR_…",...}}.
//
// Only for tests that run inside a fresh network namespace when a target is not loopback.

import { requireArg, run } from "./lib.mjs";

run(async (args) => {
  const url = requireArg(args, "url");
  const targets = requireArg(args, "targets").split("|").filter(Boolean);
  const { default: puppeteer } = await import("puppeteer-core");
  const browser = await puppeteer.connect({ browserWSEndpoint: url, protocolTimeout: 20000 });
  const results = {};
  try {
    const page = await browser.newPage();
    for (const t of targets) {
      try {
        await page.goto(t, { timeout: 15000 });
        results[t] = "ok";
      } catch (e) {
        const m = /net::ERR_[A-Z_]+/.exec(String(e?.message ?? e));
        results[t] = m ? m[0] : String(e?.message ?? e);
      }
    }
    await page.close();
  } finally {
    await browser.disconnect();
  }
  return { results };
});
