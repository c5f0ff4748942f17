// Usage errors that named the wrong thing: "cairn --store" with no value said
// `unknown command "--store"` (the option is known; its value is what is missing), and
// "cairn runs --workflow @1" (a name no workflow can have) answered "No runs match." as if
// it had looked for a workflow, where "cairn start @1" refuses the same text.

import { describe, it } from "vitest";
import { cairn, expectFailure } from "./helpers/cli.js";

describe("cairn usage errors name what is wrong", () => {
  it("a store option before the command without its value says so", async () => {
    expectFailure(await cairn(["--store"]), 2, /^cairn: --store needs a value/);
    expectFailure(await cairn(["--schema"]), 2, /^cairn: --schema needs a value/);
  });

  it("runs --workflow with text no workflow name can be is a usage error", async () => {
    for (const given of ["@1", "a@b@c", "a b", "name@"]) {
      expectFailure(
        await cairn(["runs", "--workflow", given, "--store", "sqlite:/nonexistent/cairn.db"]),
        2,
        /^cairn: --workflow must be NAME or NAME@VERSION/,
      );
    }
  });
});
