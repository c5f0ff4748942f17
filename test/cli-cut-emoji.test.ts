// `cairn runs` cuts a long REASON at 100 characters; the cut fell inside a surrogate pair
// when an emoji straddled it, and the half emoji printed as U+FFFD (the bytes EF BF BD)
// before the "…". The cut now keeps whole characters (format.ts oneLine, as cutShown and
// the HTTP API's messages do), and so does `cairn send`'s refusal of a long event name.

import { afterAll, describe, expect, it } from "vitest";
import { oneLine } from "../src/cli/format.js";
import { createEngine, FatalError, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath } from "./helpers/sqlite.js";

// "FatalError: " (12) + 86 = 98 characters, then an emoji at 98-99: a cut at 99 splits it.
const MESSAGE = `${"x".repeat(86)}🎉🎉🎉 end`;
const party = workflow({ name: "party", version: "1" }, async (ctx) => {
  await ctx.step("s", () => {
    throw new FatalError(MESSAGE);
  });
});

describe("cairn: a long value cut never splits an emoji", () => {
  const db = tempDbPath();
  afterAll(() => db.cleanup());

  it("runs: the REASON column", async () => {
    const engine = createEngine({ store: sqliteStore(db.path), workflows: [party] });
    const run = await engine.start(party, undefined, { id: "p1" });
    await run.result().catch(() => {});
    await engine.close();
    const res = await cairn(["runs", "--store", `sqlite:${db.path}`]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).not.toContain("\uFFFD");
    expect(res.stdout).toContain(`FatalError: ${"x".repeat(86)}…`);
  });

  it("oneLine and send's refusal keep whole characters", async () => {
    expect(oneLine(`ab🎉cd`, 4)).toBe("ab…");
    const name = `${"e".repeat(39)}🎉${"e".repeat(200)}`;
    const res = await cairn(["send", "p1", name, "--store", `sqlite:${db.path}`]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain(`event name "${"e".repeat(39)}" is invalid`);
  });
});
