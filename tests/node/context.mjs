// context.mjs --url <ws endpoint> --mode <write|read> [--close]
//
// Exercises what a persisted browser context must carry between sessions, on a
// made-up origin served by request interception (no network):
//   write: sets a persistent cookie, a session cookie and a localStorage item
//          on http://app.example.test/ and reports the cookies it then sees;
//   read:  reports the cookies and the localStorage item it finds there.
// With --close the browser is closed with browser.close() (CDP Browser.close)
// instead of disconnecting.
// Prints {"ok":true,"cookies":{name:value,...},"sessionCookies":[names],"localStorage":value|null}.

import { requireArg, run } from "./lib.mjs";

const ORIGIN = "http://app.example.test/";

run(async (args) => {
  const url = requireArg(args, "url");
  const mode = requireArg(args, "mode");
  const { default: puppeteer } = await import("puppeteer-core");
  const browser = await puppeteer.connect({ browserWSEndpoint: url, protocolTimeout: 20000 });
  let result;
  try {
    const page = await browser.newPage();
    await page.setRequestInterception(true);
    page.on("request", (req) =>
      req.respond({ status: 200, contentType: "text/html", body: "<title>app</title><p>app</p>" }),
    );
    await page.goto(ORIGIN);
    if (mode === "write") {
      const far = Math.floor(Date.now() / 1000) + 30 * 86400;
      await page.setCookie(
        { name: "persistent", value: "p-value", url: ORIGIN, expires: far },
        { name: "session", value: "s-value", url: ORIGIN },
      );
      await page.evaluate(() => localStorage.setItem("wc-key", "ls-value"));
    } else if (mode !== "read") {
      throw new Error(`unknown --mode ${mode}`);
    }
    const cookies = await page.cookies(ORIGIN);
    const localStorageValue = await page.evaluate(() => localStorage.getItem("wc-key"));
    result = {
      cookies: Object.fromEntries(cookies.map((c) => [c.name, c.value])),
      sessionCookies: cookies.filter((c) => c.session).map((c) => c.name),
      localStorage: localStorageValue,
    };
    await page.close();
  } finally {
    if (args.close) await browser.close();
    else await browser.disconnect();
  }
  return result;
});
