// A swap into a run's output. Branch A makes ctx.uuid("x") after step "m" joined with work of
// its own, and its worker dies right after that record. Branch B races step "q" against a
// timer of its own, then makes ctx.uuid("x") and returns it; the function returns the first
// branch's value (Promise.race). The replay's own work is slower (A's uuid comes late, so the
// hand-overs are held for it) and B's timer wins: B's call takes A's record and is handed
// A's value at once (a ctx.uuid value is). New calls wait for the verdict of such a hold
// (beforeExecute), but the function's end did not: the run completed with A's uuid as B's
// output, and A's call, made later, was never judged. Now the function's end waits for the
// verdict too (Context.finishWith): A's call comes and the run is refused; an engine closed
// meanwhile hands the run back, and the next execution refuses it.
// Deterministic: B's timer is 100 ms; A's call comes after a file read and 1 s.

import { describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import {
  crashAfterRecordThenReplay,
  delay,
  never,
  outcome,
  ownWork,
  raceOwnTimer,
} from "./helpers/crash-replay.js";
import { BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** The run, its worker dead right after A's uuid record, and that record's value; the
 *  engine that replays it. */
async function crashedAfterA(h: Harness) {
  let recorded: unknown;
  const replayed = await crashAfterRecordThenReplay(
    h,
    (c) =>
      workflow({ name: "output-swap", version: "1" }, async (ctx: WorkflowContext) => {
        return await Promise.race([
          (async () => {
            await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork(c, 1000)]);
            const u = ctx.uuid("x");
            if (c.firstRun) {
              // The uuid's record is written once its cascade is over: then the worker dies.
              await delay(200);
              c.crash();
              await never();
            }
            await ctx.step("after", () => "after");
            return `a:${u}`;
          })(),
          (async () => {
            await raceOwnTimer(ctx, c);
            return `b:${ctx.uuid("x")}`;
          })(),
        ]);
      }),
    {
      crashed: "the uuid is recorded and the worker dies",
      beforeReplay: async (runId) => {
        const steps = await h.engine([], { worker: false }).getSteps(runId);
        recorded = steps.find((s) => s.key === "@uuid:x")?.result;
        expect(typeof recorded).toBe("string");
      },
    },
  );
  return { ...replayed, recorded };
}

describe.each(BACKENDS)("%s: a run's output", (backend) => {
  const harness = useHarness(backend);

  it("is not a value an early call took from the record a hold waits for", async () => {
    const h = harness();
    const { runId, recorded, replay } = await crashedAfterA(h);
    const out = await outcome(replay, runId);
    // Was: "b:<A's uuid>", the run completed.
    expect(out).not.toBe(`b:${recorded}`);
    expect(out).toBe("NonDeterminismError");
  }, 30_000);

  it("is not written by an engine closed while the verdict is pending", async () => {
    const h = harness();
    const { wf, runId, recorded, replay: second } = await crashedAfterA(h);
    await until(async () => (await second.getRun(runId))?.status === "running", "the replay runs");
    // B's call took A's record (100 ms); A's comes after 1 s.
    await delay(400);
    await second.close();
    const view = await h.engine([], { worker: false }).getRun(runId);
    expect(view?.status).not.toBe("completed");
    const out = await outcome(h.engine([wf]), runId);
    expect(out).not.toBe(`b:${recorded}`);
    expect(out).toBe("NonDeterminismError");
  }, 30_000);
});
