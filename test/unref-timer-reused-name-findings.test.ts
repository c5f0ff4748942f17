// A branch awaiting an unref'd timer (AbortSignal.timeout's kind) may be abandoned
// by a suspension and redone on wake-up. A call of a reused name made from that branch in the
// first execution (the timer fired while another branch's step ran) must keep its value on
// the wake-up's replay, however the branches' timings fall then.

import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const unrefDelay = (ms: number) =>
  new Promise((r) => {
    setTimeout(r, ms).unref();
  });

describe.each(BACKENDS)("%s: an unref'd timer's branch reusing a name", (backend) => {
  const harness = useHarness(backend);
  for (const [firstMs, replayMs] of [
    [10, 80],
    [10, 0],
    [30, 200],
  ] as const) {
    it(`keeps each call's value (unref'd timer ${firstMs} ms first, ${replayMs} ms on replay)`, async () => {
      const h = harness();
      let execution = 0;
      const got: string[] = [];
      const wf = workflow(
        { name: `unref-reuse-${firstMs}-${replayMs}`, version: "1" },
        async (ctx: WorkflowContext) => {
          execution++;
          const ms = execution === 1 ? firstMs : replayMs;
          const [a, b] = await Promise.all([
            (async () => {
              await unrefDelay(ms);
              const v = await ctx.step("x", () => "A");
              got.push(`A got ${v}`);
              return v;
            })(),
            (async () => {
              await ctx.step("pre", () => delay(60).then(() => "pre"));
              await ctx.waitForEvent("go");
              const v = await ctx.step("x", () => "B");
              got.push(`B got ${v}`);
              return v;
            })(),
          ]);
          return `${a}${b}`;
        },
      );
      const e = h.engine([wf], { clock: realClock });
      const run = await e.start(wf, undefined);
      await until(
        async () =>
          ["waiting", "failed", "completed"].includes((await e.getRun(run.id))?.status ?? ""),
        "the run waits",
      );
      await e.sendEvent(run.id, "go");
      const out = await run.result().catch((err: Error) => err.name);
      await e.close();
      // A refusal (NonDeterminismError) is allowed; a swapped value never.
      expect(got.filter((g) => g === "A got B" || g === "B got A")).toEqual([]);
      expect(["AB", "NonDeterminismError"]).toContain(out);
    });
  }
});
