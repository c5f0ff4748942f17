// A parent fails while its child still runs; the child ends later. Its end was dropped (an
// event to a finished run has no reader), so once the child was deleted (retention takes a
// finished child of a finished parent; the parent itself stays while another child of it
// runs) a resume of the parent knew nothing of it: a call whose child the failed execution
// had created but not recorded (no intent) created it again, and the child's steps ran a
// second time; a recorded call got RunNotFoundError for a child whose outcome had been sent
// to it. A failed run can be resumed, so a child's end is now kept for it.

import { describe, expect, it } from "vitest";
import { type AnyWorkflow, createEngine, FatalError, workflow } from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** Whether a store write carries the intent of the ctx.child call "kid". */
function writesKidIntent(args: unknown[]): boolean {
  return (args[0] as RunWrite[]).some((w) =>
    w.intents?.some((i) => i.kind === "child" && i.key === "kid"),
  );
}

describe.each(BACKENDS)(
  "%s: a child that ends after its parent failed, then deleted",
  (backend) => {
    const harness = useHarness(backend);

    function family() {
      const seen = { charges: 0, broken: true };
      const kid = workflow({ name: "late-kid", version: "1" }, async (ctx, n: number) => {
        await ctx.sleep("nap", "1m");
        await ctx.step("charge", async () => {
          seen.charges++;
          return n;
        });
        return n * 10;
      });
      // Keeps the parent from retention while "kid" is deleted (it has a child left).
      const slow = workflow({ name: "slow-kid", version: "1" }, async (ctx) => {
        await ctx.sleep("long-nap", "2h");
        return "slow";
      });
      const parentHanding = (n: number): AnyWorkflow =>
        workflow({ name: "failing-parent", version: "1" }, async (ctx) =>
          Promise.all([
            ctx.child("slow", slow, undefined),
            ctx.child("kid", kid, n),
            ctx.step("flaky", () => {
              if (seen.broken) throw new FatalError("flaky is broken");
              return "ok";
            }),
          ]),
        );
      return { seen, kid, slow, parentHanding };
    }

    /** "kid" ends after "p" failed; retention deletes it (not "p": "slow" still sleeps). */
    async function endThenSweep(h: ReturnType<typeof harness>, e: { close(): Promise<void> }) {
      const kidEnded = async () => {
        const look = h.store();
        await look.open({ clock: h.clock });
        try {
          return (await look.getRun("p/kid"))?.status === "completed";
        } finally {
          await look.close();
        }
      };
      for (let i = 0; i < 200 && !(await kidEnded()); i++) {
        await h.clock.advance(1_000);
        await new Promise((r) => setTimeout(r, 2));
      }
      expect(await kidEnded()).toBe(true);
      await e.close();
      await h.clock.advance(1_000);
      const sweeper = h.engine([], { worker: false });
      const swept = await sweeper.gc({ olderThan: 0 });
      expect(swept.runs).toBe(1);
      expect(await sweeper.getRun("p/kid")).toBeUndefined();
      expect((await sweeper.getRun("p"))?.status).toBe("failed");
    }

    // Before: RunNotFoundError, though the child's outcome had been sent to the parent.
    it("a call that recorded its child gets the child's result", async () => {
      const h = harness();
      const { seen, kid, slow, parentHanding } = family();
      const parent = parentHanding(1);
      const e = h.engine([parent, kid, slow]);
      await e.start(parent, undefined, { id: "p" });
      await expect(e.handle("p").result()).rejects.toThrow("flaky is broken");
      await endThenSweep(h, e);
      expect(seen.charges).toBe(1);

      seen.broken = false;
      const resumed = h.engine([parent, kid, slow]);
      await resumed.resume("p");
      const out = advanceUntil(h.clock, resumed.handle("p").result(), 60_000, 500);
      await expect(out).resolves.toEqual(["slow", 10, "ok"]);
      expect(seen.charges).toBe(1);
    });

    // Before: the resumed parent created the child again; its steps ran a second time and the
    // parent went on with the second child's result.
    it("a call that never recorded its child gets RunNotFoundError and starts no child", async () => {
      const h = harness();
      const { seen, kid, slow, parentHanding } = family();
      seen.broken = false;
      // The parent creates its children, and the worker dies before the kid's intent.
      const store = crashableStore(h.store(), {
        crashBefore: (call) => call.verb === "appendRecords" && writesKidIntent(call.args),
      });
      const first = [parentHanding(1), kid, slow];
      const e1 = createEngine({ store, workflows: first, clock: h.clock, pollIntervalMs: 10 });
      await e1.start(first[0]!, undefined, { id: "p" });
      await until(async () => store.crashed, "crash before the kid's intent");
      await store.settled();

      // Replayed on code handing the kid another input, the parent fails at that call
      // (NonDeterminismError) before recording it; the kid, left as it is, ends afterwards.
      const second = h.engine([parentHanding(2), kid, slow]);
      await expect(advanceUntil(h.clock, second.handle("p").result(), 1_000, 200)).rejects.toThrow(
        /no longer matches its journal/,
      );
      expect(seen.charges).toBe(0);
      await endThenSweep(h, second);
      expect(seen.charges).toBe(1);

      // Resumed on the code it started on: the kid's end is there, the kid is not.
      const resumed = h.engine([parentHanding(1), kid, slow]);
      await resumed.resume("p");
      const out = advanceUntil(h.clock, resumed.handle("p").result(), 60_000, 500);
      await expect(out).rejects.toThrow(/Child run "p\/kid" no longer exists/);
      expect(seen.charges).toBe(1);
      expect(await resumed.getRun("p/kid")).toBeUndefined();
    });
  },
);
