// image-smoke.mjs --page <http url> [--timeout-ms N]
//
// The Puppeteer part of the image smoke test (tests/py/image_smoke.py): connects puppeteer-core to
// the container's proxy at $WALLCRAWLER_CDP_URL (ws://…?signingKey=<token>; taken from the
// environment so the token is on no command line and in no output), opens --page, reads what the
// page rendered (its script runs in the browser), stores a persistent cookie for the profile
// archive, takes a screenshot and disconnects without closing the browser.
// Prints {"ok":true,"title":…,"rendered":…,"cookie":…,"screenshotBytes":N,"browserVersion":…}.

import { requireArg, run } from "./lib.mjs";

run(async (args) => {
  const page_url = requireArg(args, "page");
  const url = process.env.WALLCRAWLER_CDP_URL;
  if (!url) throw new Error("WALLCRAWLER_CDP_URL is not set");
  const { default: puppeteer } = await import("puppeteer-core");
  const browser = await puppeteer.connect({
    browserWSEndpoint: url,
    defaultViewport: { width: 800, height: 600 },
    protocolTimeout: 20000,
  });
  try {
    const browserVersion = await browser.version();
    const page = await browser.newPage();
    const response = await page.goto(page_url, { waitUntil: "load" });
    const status = response ? response.status() : null;
    const title = await page.title();
    const rendered = await page.$eval("#out", (el) => el.textContent);
    await page.evaluate(() => {
      document.cookie = "smoke=persisted; max-age=86400; path=/";
    });
    const cookie = await page.evaluate(() => document.cookie);
    const shot = await page.screenshot({ type: "png" });
    await page.close();
    return { status, title, rendered, cookie, screenshotBytes: shot.length, browserVersion };
  } finally {
    await browser.disconnect();
  }
});
