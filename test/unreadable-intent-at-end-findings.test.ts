// The end of a replay reads a begun effect's or child's intent to learn whether the first
// run made its call late (issuedLate, late-intents-judged-at-end-findings). An intent whose
// data cannot be decoded (a corrupted database) made that read throw inside the run's end:
// an unhandled rejection (Node ends an embedding process on it) and a run left `running`,
// its lease renewed for ever, where it failed with NonDeterminismError naming the call
// before. Such an intent is judged as one of a call made in a cascade: at once.

import { describe, expect, it } from "vitest";
import { NonDeterminismError, type Store, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { strayRejections } from "./helpers/stray-rejections.js";

/** `store`, whose journals hold an intent of effect "charge" (begun, never finished, as a
 *  crash leaves it) with data no codec decodes. */
function withGarbledIntent(store: Store): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === "loadJournal") {
        return async (runId: string) => {
          const j = await target.loadJournal(runId);
          const intent = { runId, key: "charge", kind: "effect" as const, name: "charge" };
          return { ...j, intents: [...j.intents, { ...intent, data: "[{,garbage", createdAt: 0 }] };
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

describe.each(BACKENDS)("%s: an undecodable intent at the end of a replay", (backend) => {
  const harness = useHarness(backend);
  const stray = strayRejections();

  it("a begun effect the code no longer makes fails the run with NonDeterminismError", async () => {
    const h = harness();
    // The code no longer makes the effect its journal says was begun.
    const wf = workflow({ name: "garbled-intent", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("go");
      return "done";
    });
    const engine = h.engine([wf], { store: withGarbledIntent(h.store()) });
    const run = await engine.start(wf, undefined);
    await until(async () => (await engine.getRun(run.id))?.status === "waiting", "the run waits");
    // Woken, the run's journal is read: it holds the begun effect.
    await engine.sendEvent(run.id, "go", 1);
    const outcome = await advanceUntil(
      h.clock,
      engine
        .handle(run.id)
        .result()
        .then(
          () => "completed",
          (err: unknown) => err,
        ),
      1_000,
      100,
    );
    expect(outcome, String(outcome)).toBeInstanceOf(NonDeterminismError);
    expect((outcome as Error).message).toContain('effect "charge"');
    expect(stray).toEqual([]);
  }, 30_000);
});
