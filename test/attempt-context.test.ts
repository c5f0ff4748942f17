// The `s` a step body is handed is an AttemptContext: its getters (idempotencyKey, signal)
// live on its prototype, so an attempt defines no accessor of its own. An object literal with
// getters was built by V8's runtime property by property, about 1 us an attempt (counted
// here: own accessor properties per attempt, 2 before, 0 now). What a body does with `s` is
// unchanged: the key is stable, the signal aborts, spend (also taken off `s`) is recorded.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type StepContext, sqliteStore, workflow } from "../src/index.js";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function ownAccessors(o: object): string[] {
  return Object.entries(Object.getOwnPropertyDescriptors(o))
    .filter(([, d]) => d.get !== undefined || d.set !== undefined)
    .map(([k]) => k);
}

describe("a step attempt's context", () => {
  it("has no accessor of its own, and reads as before", async () => {
    const seen: Array<{ accessors: string[]; key: string; again: string; attempt: number }> = [];
    const signals: AbortSignal[] = [];
    const wf = workflow({ name: "s", version: "1" }, async (ctx) => {
      const a = await ctx.step(
        "a",
        (s: StepContext) => {
          seen.push({
            accessors: ownAccessors(s),
            key: s.idempotencyKey,
            again: s.idempotencyKey,
            attempt: s.attempt,
          });
          signals.push(s.signal);
          const { spend } = s;
          spend({ tokens: 3 });
          if (s.attempt === 1) throw new Error("once more");
          return s.idempotencyKey;
        },
        { retry: { maxAttempts: 2, initialDelay: 1 } },
      );
      return a;
    });
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    cleanups.push(() => engine.close());
    const handle = await engine.start(wf, {});
    const key = await handle.result();
    expect(seen.map((s) => s.accessors)).toEqual([[], []]);
    expect(seen.map((s) => s.attempt)).toEqual([1, 2]);
    expect(new Set(seen.flatMap((s) => [s.key, s.again]))).toEqual(new Set([key]));
    expect(signals.map((s) => s.aborted)).toEqual([false, false]);
    // Both attempts' spend was charged: the failed one's with its attempt, the other's with
    // the record.
    const run = await engine.getRun(handle.id);
    expect(run?.budget.spent).toEqual({ tokens: 6 });
  });
});
