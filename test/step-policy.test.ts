// A step with no retry options of its own takes its execution's retry policy, resolved and
// checked once (context.ts, stepRules): resolving it made an object, an array and two
// closures a step. Counted: resolvePolicy calls for a 20-step run, 1 (it was 20). A step
// with options of its own still resolves its own, which may mend the workflow's policy.

import { afterEach, describe, expect, it, vi } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import * as retry from "../src/workflow/retry.js";

vi.mock("../src/workflow/retry.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../src/workflow/retry.js")>();
  return { ...original, resolvePolicy: vi.fn(original.resolvePolicy) };
});

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("a step's retry policy", () => {
  it("is resolved once an execution for the steps without retry options", async () => {
    const wf = workflow(
      { name: "policy", version: "1", retry: { maxAttempts: 4 } },
      async (ctx) => {
        let sum = 0;
        for (let i = 0; i < 20; i++) sum += await ctx.step("s", () => i);
        return sum;
      },
    );
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    cleanups.push(() => engine.close());
    const resolve = vi.mocked(retry.resolvePolicy);
    resolve.mockClear();
    expect(await (await engine.start(wf, {})).result()).toBe(190);
    const stepCalls = resolve.mock.calls.filter(([, where]) => /^Step "s/.test(where?.() ?? ""));
    expect(stepCalls.length).toBe(1);
  });

  it("of a step with options of its own is its own, over the workflow's", async () => {
    let attempts = 0;
    const wf = workflow(
      // maxAttempts 0 is refused on its own; the step's own 2 mends it for that step.
      { name: "policy-own", version: "1", retry: { maxAttempts: 0, initialDelay: 1 } },
      async (ctx) =>
        ctx.step(
          "own",
          () => {
            attempts++;
            if (attempts < 2) throw new Error("again");
            return attempts;
          },
          { retry: { maxAttempts: 2 } },
        ),
    );
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    cleanups.push(() => engine.close());
    expect(await (await engine.start(wf, {})).result()).toBe(2);
  });
});
