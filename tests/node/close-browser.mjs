// close-browser.mjs --url <ws endpoint> [--bearer <token>] [--timeout-ms N]
//
// Puppeteer connects and calls browser.close(), which sends CDP Browser.close
// (ends the browser). Prints {"ok":true} once close() resolved.

import { bearerHeaders, requireArg, run } from "./lib.mjs";

run(async (args) => {
  const url = requireArg(args, "url");
  const headers = bearerHeaders(args);
  const { default: puppeteer } = await import("puppeteer-core");
  const browser = await puppeteer.connect({ browserWSEndpoint: url, headers, protocolTimeout: 20000 });
  const started = Date.now();
  await browser.close();
  return { closeMs: Date.now() - started };
});
