// The `s` a step body is handed is an AttemptContext: its getters (idempotencyKey, signal)
// are written once, on its prototype, and each attempt defines them as its own enumerable
// properties from one shared set of descriptors, so an attempt makes no closure (an object
// literal with getters was built by V8's runtime property by property, about 1 us an
// attempt) and a spread of `s` still copies them. What a body does with `s` is unchanged:
// the key is stable, the signal aborts, spend (also taken off `s`) is recorded.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type StepContext, sqliteStore, workflow } from "../src/index.js";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Own accessors whose getter is not the prototype's own (a closure made per attempt). */
function ownAccessors(o: object): string[] {
  const proto = Object.getOwnPropertyDescriptors(Object.getPrototypeOf(o));
  return Object.entries(Object.getOwnPropertyDescriptors(o))
    .filter(([k, d]) => (d.get !== undefined || d.set !== undefined) && d.get !== proto[k]?.get)
    .map(([k]) => k);
}

describe("a step attempt's context", () => {
  it("makes no accessor of its own, and reads as before", async () => {
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
