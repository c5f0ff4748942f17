// Issue 13: what an executed step costs the engine's JavaScript, counted, not timed. An
// attempt's `s` defines its two accessors without Object.defineProperties (which read each
// descriptor object field by field: ~6,600 instructions an attempt under callgrind, ~2,750
// for the two __defineGetter__ calls now; bench/step-instructions.ts), and the budget check
// before each attempt reads the run's limits without Object.entries (an array each time). A
// longer run makes neither call more often than a shorter one.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const loop = workflow({ name: "loop", version: "1" }, async (ctx, input: { steps: number }) => {
  let sum = 0;
  for (let i = 0; i < input.steps; i++) {
    sum += await ctx.step("s", (s) => (s.attempt === 1 ? i : -1));
  }
  return sum;
});

/** Calls of Object[name] while `fn` runs. */
async function countCalls(
  name: "defineProperties" | "entries",
  fn: () => Promise<void>,
): Promise<number> {
  const original = Object[name] as (...a: unknown[]) => unknown;
  let n = 0;
  (Object as unknown as Record<string, unknown>)[name] = (...a: unknown[]) => {
    n++;
    return original.apply(Object, a);
  };
  try {
    await fn();
  } finally {
    (Object as unknown as Record<string, unknown>)[name] = original;
  }
  return n;
}

describe("an executed step's work (issue 13)", () => {
  it.each(["defineProperties", "entries"] as const)(
    "calls Object.%s no more often in a run of 40 steps than in one of 10",
    async (name) => {
      const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop] });
      cleanups.push(() => engine.close());
      const run = async (steps: number) => {
        const out = await (await engine.start(loop, { steps })).result();
        expect(out).toBe((steps * (steps - 1)) / 2);
      };
      await run(10); // warm: the first run makes what an engine makes once
      const ten = await countCalls(name, () => run(10));
      const forty = await countCalls(name, () => run(40));
      // Per step, the two differ by 30 steps' calls: 0 now, 30 (one an attempt) before.
      expect(forty - ten).toBe(0);
    },
  );
});
