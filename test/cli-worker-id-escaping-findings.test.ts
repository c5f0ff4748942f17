// `cairn runs` and `cairn show` print a worker id (caller-chosen text: any characters)
// as they print other caller text, with its control characters escaped. Before, `cairn
// runs` folded a line break in a worker id into a space: "wrk_a\nrunning on wrk_b" read as
// more of the explanation (a held run seemed to run on another worker).

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Store, sqliteStore } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDir } from "./helpers/sqlite.js";

const HOUR = 3_600_000;
/** Worker ids that clear the screen, break lines, carry NUL and a C1 CSI. */
const HOLDER = "wrk_\x1b[2J\nrunning on wrk_fake\0z";
const OWNER = "wrk_\u009b31m\r\nX\tY";

describe("worker ids in `cairn runs` and `cairn show`", () => {
  let dir: ReturnType<typeof tempDir>;
  let db: string;
  let store: Store;

  beforeAll(async () => {
    dir = tempDir();
    db = `${dir.dir}/cairn.db`;
    store = sqliteStore(db);
    await store.open({ clock: { now: () => Date.now() } as never });
    for (const [id, worker] of [
      ["held", HOLDER],
      ["leased", OWNER],
    ] as const) {
      await store.createRun({ id, workflow: "w", version: "1", input: "[null]", budgetLimit: {} });
      const [c] = await store.claimRuns({
        workerId: worker,
        workflows: ["w@1"],
        limit: 1,
        leaseMs: HOUR,
      });
      if (id !== "held") continue;
      const out = await store.releaseRun({
        runId: id,
        epoch: c!.run.epoch,
        status: "pending",
        readyAt: await store.now(),
        heldFor: { workerId: worker, ms: HOUR },
      });
      if (!out.ok) throw new Error("release lost");
    }
  });
  afterAll(async () => {
    await store?.close();
    dir?.cleanup();
  });

  /** The text a terminal is handed: no control character but the lines' own breaks. */
  function expectInert(text: string): void {
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is looked for
    expect(text).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
  }

  it("`cairn runs` escapes them, a line break too, as JSON does", async () => {
    const runs = await cairn(["runs"], { CAIRN_STORE: `sqlite:${db}` });
    expect(runs.code, runs.stderr).toBe(0);
    expectInert(runs.stdout);
    expect(runs.stdout).toContain("held by wrk_\\u001b[2J\\nrunning on wrk_fake\\u0000z until");
    expect(runs.stdout).toContain("running on wrk_\\u009b31m\\r\\nX\\tY (lease until");
    expect(runs.stdout.trimEnd().split("\n")).toHaveLength(3);
  });

  it("`cairn show` escapes them in its held, lease and why lines", async () => {
    const env = { CAIRN_STORE: `sqlite:${db}` };
    const held = await cairn(["show", "held"], env);
    expect(held.code, held.stderr).toBe(0);
    expectInert(held.stdout);
    expect(held.stdout).toMatch(
      /\n {2}held {8}wrk_\\u001b\[2J\\nrunning on wrk_fake\\u0000z until /,
    );
    const leased = await cairn(["show", "leased"], env);
    expect(leased.code, leased.stderr).toBe(0);
    expectInert(leased.stdout);
    expect(leased.stdout).toContain("  why         running on wrk_\\u009b31m\\r\\nX\\tY\n");
    expect(leased.stdout).toContain("  lease       wrk_\\u009b31m\\r\\nX\\tY until ");
  });
});
