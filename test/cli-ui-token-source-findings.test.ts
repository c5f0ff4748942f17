// `cairn ui` with a bad token from $CAIRN_UI_TOKEN (or $CAIRN_UI_READ_TOKEN) said only
// "--token holds a space": a user who gave no --token looked for one. The message now
// says the token comes from the variable; one given as a flag reads as before.

import { describe, it } from "vitest";
import { cairn, expectFailure } from "./helpers/cli.js";

describe("cairn ui names where a bad token came from", () => {
  it("from $CAIRN_UI_TOKEN and $CAIRN_UI_READ_TOKEN", async () => {
    expectFailure(
      await cairn(["ui", "--port", "0", "--store", "sqlite:/nonexistent/cairn.db"], {
        CAIRN_UI_TOKEN: "has a space here",
      }),
      2,
      /^cairn: --token holds a space; .* \(it comes from \$CAIRN_UI_TOKEN: no --token was given\)\n/,
    );
    expectFailure(
      await cairn(["ui", "--port", "0", "--token", "a-good-token-1"], {
        CAIRN_UI_READ_TOKEN: "short",
      }),
      2,
      /^cairn: --read-token must be at least 8 characters \(a long random string\) \(it comes from \$CAIRN_UI_READ_TOKEN: no --read-token was given\)\n/,
    );
  });

  it("a flag's token is named as the flag alone", async () => {
    expectFailure(
      await cairn(["ui", "--port", "0", "--token", "a b c d e f"]),
      2,
      /^cairn: --token holds a space; [^(]*\n/,
    );
  });
});
