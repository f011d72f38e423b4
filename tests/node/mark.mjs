// mark.mjs --url <ws connect URL>
//
// Opens a page served on 127.0.0.1 through the session at --url and prints the mark the tests'
// extension sets on it: {"ok":true,"mark":"ext"} (or "mark":null without the extension).

import { markOn, requireArg, run, servePage } from "./lib.mjs";

run(async (args) => {
  const page = await servePage();
  try {
    return { mark: await markOn(requireArg(args, "url"), page.url) };
  } finally {
    page.close();
  }
});
