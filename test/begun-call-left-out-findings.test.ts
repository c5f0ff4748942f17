// A replay whose function returned without making a call the first run began durably and
// never finished (its intent: an effect about to perform, a child started) completed the
// run as if nothing had begun there: the effect's perform may have run, and the child was
// left running for a parent that had completed. A recorded call left out the same way fails
// the run with NonDeterminismError (the end-of-run check); a begun one now does too, naming
// it. The same code, making the call again, still ends as the first run would have.

import { describe, expect, it } from "vitest";
import { type AnyWorkflow, createEngine, NonDeterminismError, workflow } from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

type Begun = "effect" | "child";

const kid = workflow({ name: "begun-kid", version: "1" }, async (ctx) => {
  await ctx.sleep("nap", "1s");
  return "kid";
});

/** The workflow as first deployed: it begins `kind` after step "a"; `leftOut`: the code
 *  deployed after the crash, which returns without it. */
function parentOf(kind: Begun, leftOut: boolean): AnyWorkflow {
  return workflow({ name: "begun-parent", version: "1" }, async (ctx) => {
    await ctx.step("a", () => 1);
    if (leftOut) return "done";
    if (kind === "effect") {
      await ctx.effect("pay", { perform: async () => "paid", reconcile: async () => undefined });
    } else {
      await ctx.child("kid", kid, undefined);
    }
    return "done";
  });
}

/** Crashes the first engine right after the intent of `kind` is durable; a new engine on
 *  `after` then takes the run over. Resolves with how the run ends. */
async function crashAfterIntent(h: Harness, kind: Begun, after: AnyWorkflow): Promise<unknown> {
  const store = crashableStore(h.store(), {
    crashAfter: (call) =>
      call.verb === "appendRecords" &&
      (call.args[0] as RunWrite[]).some((w) => w.intents?.some((i) => i.kind === kind)),
  });
  const first = parentOf(kind, false);
  const e1 = createEngine({ store, workflows: [first, kid], clock: h.clock, pollIntervalMs: 10 });
  await e1.start(first, undefined, { id: "p" });
  await until(async () => store.crashed, `crash after the ${kind}'s intent`);
  await store.settled();
  const e2 = h.engine([after, kid]);
  return advanceUntil(h.clock, e2.handle("p").result(), 1_000, 200);
}

describe.each(BACKENDS)("%s: a call begun and left out by a replay that returned", (backend) => {
  const harness = useHarness(backend);

  it.each(["effect", "child"] as const)("a begun %s fails the run, naming it", async (kind) => {
    const h = harness();
    const out = crashAfterIntent(h, kind, parentOf(kind, true));
    // Before the mend: the run completed with "done".
    await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
    const key = kind === "effect" ? "pay" : "kid";
    await expect(out).rejects.toThrow(
      `the workflow returned, but the journal recorded ${kind} "${key}" (key "${key}") begun and not finished that this code never called`,
    );
  });

  it.each(["effect", "child"] as const)("the same code finishes the begun %s", async (kind) => {
    const h = harness();
    expect(await crashAfterIntent(h, kind, parentOf(kind, false))).toBe("done");
  });
});
