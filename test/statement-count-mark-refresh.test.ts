// test/sqlite-statements.test.ts failed once beside three other files ("expected 6 to be 5":
// 6 reads of the encrypted mark for 5 runs). The sixth was the plain-payload guard's
// background read (plain-payloads.ts, #refresh): the first write after its last "not marked"
// is MARK_FRESH_MS (1 s) old on the store's clock reads the mark again, and under the real
// clock a loaded machine stretched the counted window past 1 s (seen under three busy
// loops: windows of 651 and 1,032 ms, the extra read's stack through isMarkedEncrypted).
// Here the clock is moved past MARK_FRESH_MS before every counted run, so each window holds
// that read for sure: the counter (helpers/sqlite-statement-counts.ts) counts it apart, and
// the runs' own statements come out exactly as the statements test expects them.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import type { Clock } from "../src/lib/clock.js";
import { realClock } from "../src/lib/clock.js";
import { MARK_FRESH_MS } from "../src/store/plain-payloads.js";
import { statementCounts } from "./helpers/sqlite-statement-counts.js";

const c = statementCounts();
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  c.counting = false;
  for (const f of cleanups.splice(0).reverse()) await f();
});

const loop = workflow(
  { name: "loop", version: "1" },
  async (ctx, input: { steps: number }): Promise<number> => {
    let sum = 0;
    for (let i = 0; i < input.steps; i++) sum += (await ctx.step("s", async () => ({ i }))).i;
    return sum;
  },
);

describe("the guard's background mark read in a counted window", () => {
  it("is counted apart: each run's own statements are exact however long the window", async () => {
    // Real time, read ahead by `ahead`: moved past MARK_FRESH_MS before each run, as a slow
    // machine's window would take that long.
    let ahead = 0;
    const clock: Clock = { ...realClock, now: () => Date.now() + ahead };
    const engine = createEngine({
      store: sqliteStore(":memory:"),
      workflows: [loop],
      clock,
      leaseMs: 3_600_000,
    });
    cleanups.push(() => engine.close());
    for (let i = 0; i < 2; i++) await (await engine.start(loop, { steps: 20 })).result();
    c.start();
    const runs = 5;
    for (let i = 0; i < runs; i++) {
      ahead += MARK_FRESH_MS + 1;
      expect(await (await engine.start(loop, { steps: 20 })).result()).toBe(190);
    }
    c.counting = false;
    // The background read happened (it is what the clock move sets off)...
    expect(c.markRefreshes).toBeGreaterThanOrEqual(1);
    // ...and the runs' own statements are what sqlite-statements.test.ts counts: the mark
    // read in no statement of its own, 23 statements a run besides the engine's claim rounds.
    expect(c.like(/^SELECT 1 FROM store_marks/)).toBe(0);
    expect(c.like(/^INSERT INTO steps/)).toBe(runs * 20);
    const claims = c.like(/runs_ready_idle/);
    expect(claims).toBeLessThanOrEqual(runs);
    expect(c.total() - claims).toBe(runs * 23);
    expect(c.objectRuns).toBe(0);
  });
});
