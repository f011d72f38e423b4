// two-clients.mjs --url <ws endpoint> [--bearer <token>] [--timeout-ms N]
//
// Puppeteer and Playwright attached to the same endpoint at the same time.
// Each opens a page and evaluates 1+1 while the other is connected (and
// again after the other has evaluated). Both disconnect without closing the
// browser. Prints {"ok":true,"puppeteer":2,"playwright":2,...}.

import { DATA_URL, bearerHeaders, requireArg, run } from "./lib.mjs";

run(async (args) => {
  const url = requireArg(args, "url");
  const headers = bearerHeaders(args);
  const [{ default: puppeteer }, { chromium }] = await Promise.all([
    import("puppeteer-core"),
    import("playwright-core"),
  ]);
  const pp = await puppeteer.connect({ browserWSEndpoint: url, headers, protocolTimeout: 20000 });
  let pw;
  try {
    pw = await chromium.connectOverCDP(url, { headers, timeout: 20000 });
    const ppPage = await pp.newPage();
    const pwContext = pw.contexts()[0] ?? (await pw.newContext());
    const pwPage = await pwContext.newPage();
    await Promise.all([ppPage.goto(DATA_URL), pwPage.goto(DATA_URL)]);
    const a = await ppPage.evaluate(() => 1 + 1);
    const b = await pwPage.evaluate(() => 1 + 1);
    // Interleave once more, concurrently, to be sure both sockets are live.
    const [a2, b2] = await Promise.all([ppPage.evaluate(() => 1 + 1), pwPage.evaluate(() => 1 + 1)]);
    if (pp.connected !== true) throw new Error("puppeteer lost its connection");
    if (!pw.isConnected()) throw new Error("playwright lost its connection");
    // Each client sees the other's page as a target.
    const ppSeesPages = (await pp.pages()).length;
    await pwPage.close();
    await ppPage.close();
    for (const [name, v] of [["puppeteer", a], ["playwright", b], ["puppeteer(2)", a2], ["playwright(2)", b2]]) {
      if (v !== 2) throw new Error(`${name}: 1+1 evaluated to ${JSON.stringify(v)}`);
    }
    return { puppeteer: a, playwright: b, puppeteerSawPages: ppSeesPages };
  } finally {
    if (pw) await pw.close();
    await pp.disconnect();
  }
});
