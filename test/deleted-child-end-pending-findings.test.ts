// A parent that crashed between its child's create and its record of the call (the child's
// intent) is failed when replayed on code handing the child another input
// (NonDeterminismError; the child is left as it is). The child's end, once it ran, waits
// among the parent's events. Retention may delete the child then (its parent has failed);
// a resume of the parent on the new code created the child again under the same id, with
// the new input, and took the deleted child's pending end for the new child's: the parent
// went on with a result computed from the old input (silently different data), and the
// child ran a second time. A call whose child's end is pending while no child is under
// its id any more now gets RunNotFoundError, as a recorded call whose child retention
// deleted does, and creates nothing.

import { describe, expect, it } from "vitest";
import { type AnyWorkflow, createEngine, NonDeterminismError, workflow } from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** Whether a store write carries the intent of a ctx.child call. */
function writesChildIntent(args: unknown[]): boolean {
  return (args[0] as RunWrite[]).some((w) => w.intents?.some((i) => i.kind === "child"));
}

describe.each(BACKENDS)("%s: a child deleted while its end waits for its parent", (backend) => {
  const harness = useHarness(backend);

  // Before the mend, both resolved with 10: on the code handing 2, the deleted child's result
  // for input 1; on the code it started on, with the child run a second time.
  it.each([
    ["code handing another input", 2],
    ["the code it started on", 1],
  ] as const)(
    "a resume on %s gets RunNotFoundError and starts no child",
    async (_, resumedHanding) => {
      const h = harness();
      let charges = 0;
      const kid = workflow({ name: "gone-kid", version: "1" }, async (ctx, n: number) => {
        await ctx.step("charge", async () => {
          charges++;
          return n;
        });
        return n * 10;
      });
      const parentHanding = (n: number): AnyWorkflow =>
        workflow({ name: "gone-parent", version: "1" }, async (ctx) => ctx.child("kid", kid, n));

      // The parent creates its child, and the worker dies before the call's intent.
      const store = crashableStore(h.store(), {
        crashBefore: (call) => call.verb === "appendRecords" && writesChildIntent(call.args),
      });
      const first = [parentHanding(1), kid];
      const e1 = createEngine({ store, workflows: first, clock: h.clock, pollIntervalMs: 10 });
      await e1.start(first[0]!, undefined, { id: "p" });
      await until(async () => store.crashed, "crash before the child's intent");
      await store.settled();

      // A worker serving only the child runs it to its end, which waits among the parent's
      // events (the parent is pending, not finished).
      const kidOnly = h.engine([kid]);
      await advanceUntil(h.clock, kidOnly.handle("p/kid").result(), 1_000, 200);
      await kidOnly.close();
      await h.clock.advance(3_600_000);

      // The parent replayed on code handing another input fails, the child left as it is.
      const second = h.engine([parentHanding(2), kid]);
      await expect(
        advanceUntil(h.clock, second.handle("p").result(), 1_000, 200),
      ).rejects.toBeInstanceOf(NonDeterminismError);
      // Retention deletes the child, which ended an hour before its parent failed.
      const swept = await second.gc({ olderThan: "30m" });
      expect(swept.runs).toBe(1);
      expect(await second.getRun("p/kid")).toBeUndefined();
      expect(await second.getRun("p")).toBeDefined();

      charges = 0;
      await second.close();
      const resumed = h.engine([parentHanding(resumedHanding), kid]);
      await resumed.resume("p");
      const out = advanceUntil(h.clock, resumed.handle("p").result(), 1_000, 200);
      await expect(out).rejects.toThrow(/Child run "p\/kid" no longer exists/);
      await expect(out).rejects.toMatchObject({ name: "RunNotFoundError" });
      // Nothing was created again under the child's id, and no child ran again.
      expect(await resumed.getRun("p/kid")).toBeUndefined();
      expect(charges).toBe(0);
    },
    60_000,
  );
});
