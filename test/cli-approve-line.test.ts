// `cairn approve --by` with a line break (a pasted name, a script's variable) printed its
// confirmation over two lines: `Approved "merge" of run "r1" as evil` and then `name at ...`
// as if a second line of output, while `cairn show` writes the same answer escaped
// (`evil\nname`). The confirmation now escapes the approver, the key and the run id too
// (approve.ts).

import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const review = workflow({ name: "line-review", version: "1" }, async (ctx) =>
  ctx.approval("merge", { request: { pr: 1 } }),
);

describe("cairn approve: the confirmation is one line", () => {
  const db = tempDbPath();
  afterAll(() => db.cleanup());

  it("escapes a line break in --by, as cairn show does", async () => {
    const engine = createEngine({
      store: sqliteStore(db.path),
      workflows: [review],
      pollIntervalMs: 20,
    });
    try {
      await engine.start(review, undefined, { id: "r1" });
      await until(async () => (await engine.getRun("r1"))?.status === "waiting", "r1 waits");
      const store = ["--store", `sqlite:${db.path}`];
      const res = await cairn(["approve", "r1", "merge", "--by", "first\nsecond", ...store]);
      expect(res.code, res.stderr).toBe(0);
      const lines = res.stdout.trimEnd().split("\n");
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^Approved "merge" of run "r1" as first\\nsecond at \S+Z\.$/);
      const shown = await cairn(["show", "r1", ...store]);
      expect(shown.stdout).toContain("approved by first\\nsecond at ");
    } finally {
      await engine.close();
    }
  });
});
