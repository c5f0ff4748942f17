// `cairn show` printed every value whole: a run started with a 1 MB input printed a
// megabyte, burying its status, steps and approvals. A value longer than 4,000 characters is
// now cut there, saying how much more there is and that --json prints it whole (format.ts,
// cutShown); --json is unchanged.

import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath } from "./helpers/sqlite.js";

const LONG = "x".repeat(200_000);

const wf = workflow({ name: "show-long", version: "1" }, async (ctx, input: { blob: string }) =>
  ctx.approval("ship", { request: { diff: `${input.blob.slice(0, 50_000)}\n` } }),
);

describe("cairn show: long values", () => {
  const db = tempDbPath();
  afterAll(() => db.cleanup());

  it("are cut, saying how much more there is; --json prints them whole", async () => {
    const engine = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    const run = await engine.start(wf, { blob: LONG }, { id: "long" });
    await waitForStatus(run, "waiting");
    await engine.close();

    const shown = await cairn(["show", "long", "--store", `sqlite:${db.path}`]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout.length).toBeLessThan(12_000);
    expect(shown.stdout).toMatch(
      /x… \(196,\d{3} more characters: cairn show --json prints it whole\)/,
    );
    expect(shown.stdout).toMatch(
      /x… \(46,\d{3} more characters: cairn show --json prints it whole\)/,
    );
    expect(shown.stdout).toContain("waiting for approval");

    const json = await cairn(["show", "long", "--json", "--store", `sqlite:${db.path}`]);
    expect(json.code, json.stderr).toBe(0);
    const parsed = JSON.parse(json.stdout) as { run: { input: { blob: string } } };
    expect(parsed.run.input.blob).toBe(LONG);
  });
});
