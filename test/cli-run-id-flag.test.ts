// `cairn start agent --id ' lead'` said "start(): run id " lead" is invalid": the engine's
// call, which a CLI user never typed. The CLI now checks --id itself (start and fork), before
// any store is opened, and names the flag: a usage error (exit 2) that points at --help.

import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDir } from "./helpers/sqlite.js";

describe("cairn start/fork --id of an invalid run id", () => {
  const dir = tempDir("cairn-id-");
  const env = { CAIRN_STORE: `sqlite:${join(dir.dir, "cairn.db")}` };
  afterAll(() => dir.cleanup());

  it("cairn start names --id, not start()", async () => {
    const res = await cairn(["start", "agent@1", "--id", " lead"], env);
    expectFailure(
      res,
      2,
      /^cairn: --id: run id " lead" is invalid; use 1-256 characters, not starting with a space\nRun "cairn start --help" for usage\.\n$/,
    );
    expect(res.stderr).not.toContain("start()");
  });

  it("cairn fork names --id, not fork()", async () => {
    const res = await cairn(["fork", "some-run", "--from", "s", "--id", "x".repeat(257)], env);
    expectFailure(res, 2, /^cairn: --id: run id "x{257}" is invalid; use 1-256 characters/);
    expect(res.stderr).not.toContain("fork()");
  });
});
