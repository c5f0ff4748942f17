// A swap through a begun effect's intent, at the end of a journal.
// Branch A makes effect x ("a") after step "m" joined with work of its own; its perform runs
// (the provider stores "a" under the call's idempotency key) and the worker dies before x's
// record. Branch B races step "q" against a timer of its own, then makes effect x ("b") and
// sends what x handed it. The replay's own work is slower (A's x comes late) and B's timer
// wins: B's call is the name's first and matches A's intent (matchIntent checks kind and name
// only: "an intent holds no window"), so B's reconcile is asked with A's idempotency key, is
// handed "a", and B performs "send" with it; only A's call, made later, is refused. The held
// hand-over (doubtfulCall) guards a record made inside a cascade, not an intent: with no
// record of x, nothing was held at all. Now a late call that finds an intent written inside a
// cascade waits, before it executes, while the workflow's own work may still make calls
// (Context.beforeExecute, at most replayStallMs): A's call comes meanwhile and is refused.
// Deterministic: B's timer is 100 ms; A's call comes after a file read and 1 s.

import { describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import {
  crashAfterRecordThenReplay,
  delay,
  effectX,
  outcome,
  ownWork,
  raceOwnTimer,
  sendWith,
  swaps,
} from "./helpers/crash-replay.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

describe.each(BACKENDS)("%s: a begun effect's intent at the end of a journal", (backend) => {
  const harness = useHarness(backend);

  it("is not taken by an early call of its name from a race its own timer won", async () => {
    const h = harness();
    const got: string[] = [];
    const performed: string[] = [];
    const provider = new Map<string, string>();
    const { runId, replay } = await crashAfterRecordThenReplay(
      h,
      (c) =>
        workflow({ name: "intent-swap", version: "1" }, async (ctx: WorkflowContext) => {
          const x = async (id: string) => {
            const v = await effectX(ctx, c, id, provider);
            got.push(`${id}=${v}`);
            return v;
          };
          await Promise.all([
            (async () => {
              await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork(c, 1000)]);
              await x("a");
            })(),
            (async () => {
              await raceOwnTimer(ctx, c);
              await sendWith(ctx, await x("b"), performed);
            })(),
          ]);
          return "done";
        }),
      { crashed: "A's x performs and the worker dies" },
    );
    const out = await outcome(replay, runId);
    // Was: got ["b=a"], performed ["b sent a"], then refused at A's call.
    expect(swaps(got)).toEqual([]);
    expect(performed).toEqual([]);
    expect(out).toBe("NonDeterminismError");
  }, 30_000);
});
