// Finding (mended). A correct program swapped through a begun effect's intent
// after a crash; no race against a timer of its own. Branch A makes effect x ("a") after
// step "m" joined with work of its own; branch B makes effect x ("b") after step "s". The
// first run makes A's x inside m's cascade (its own work was done), and its worker dies
// while A's perform runs (the provider stored "a" under x's idempotency key; x has an
// intent, no record), before s ends. On the replay, A's own work takes 300 ms and s (a new
// call now) 150 ms: B's call, made inside s's cascade, was the name's first and matched A's
// intent (kind and name only), so B's reconcile was asked with A's key and B was handed "a";
// A's call, made later, was then refused. Had the first run gone on, B's call would have
// been x#2 with its own value. A record of x would not let this happen: a call recorded
// inside a cascade is demanded by the end of that cascade, and the hand-overs (s's) are held
// until it is made (Context.missingCall). The mend: an effect's or a child's intent written
// inside a cascade holds its window (records.ts, intentRecord), the replay demands it there
// as a record (JournalIndex.cascadeCalls), a late call taking it while held keeps the hold
// (doubtful) and is placed in that cascade (its node is fixed), so B's call is x#2.
// Deterministic: s takes 150 ms; A's call comes after a file read and 300 ms.

import { describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import {
  crashAfterRecordThenReplay,
  delay,
  effectX,
  never,
  outcome,
  ownWork,
  swaps,
} from "./helpers/crash-replay.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

describe.each(BACKENDS)("%s: a begun effect's intent made inside a cascade", (backend) => {
  const harness = useHarness(backend);

  it("is reconciled for its own call, not for a later call of its name", async () => {
    const h = harness();
    const got: string[] = [];
    const performs: string[] = [];
    const provider = new Map<string, string>();
    const { runId, replay } = await crashAfterRecordThenReplay(
      h,
      (c) =>
        workflow({ name: "intent-window", version: "1" }, async (ctx: WorkflowContext) => {
          const x = async (id: string) => {
            const v = await effectX(ctx, c, id, provider, performs);
            got.push(`${id}=${v}`);
          };
          await Promise.all([
            (async () => {
              await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork(c, 300)]);
              await x("a");
            })(),
            (async () => {
              await ctx.step("s", () => (c.firstRun ? never() : delay(150).then(() => "s")));
              await x("b");
            })(),
          ]);
          return "done";
        }),
      { crashed: "A's x performs and the worker dies" },
    );
    const out = await outcome(replay, runId);
    // Was: got ["b=a"], then NonDeterminismError at A's call.
    expect(swaps(got)).toEqual([]);
    expect(out).toBe("done");
    expect(got.sort()).toEqual(["a=a", "b=b"]);
    // A's perform ran once, before the crash: its replay is reconciled.
    expect(performs).toEqual(["a", "b"]);
  }, 30_000);
});
