// A child's end sent to a failed parent is kept for the parent's resume (f0b61f8). A child
// that failed while its parent was failed, then was resumed by hand and completed, left the
// parent two ends: its failure, then its completion. The resumed parent took the first, the
// stale failure, though resume() says a failed child is re-awaited with its CURRENT outcome
// (and before the ends were kept, it was: the parent asked the child). A parent that
// catches the child's error went down the other path: a replay handed different data.

import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { gate } from "./helpers/store-verbs.js";

describe.each(BACKENDS)(
  "%s: a child that failed, then was resumed, while its parent was failed",
  (backend) => {
    const harness = useHarness(backend);

    function family() {
      const seen = { kidBroken: true, parentBroken: true, kidGoesOn: gate() };
      seen.kidGoesOn.open();
      const kid = workflow({ name: "kid-resumed", version: "1" }, async (ctx) => {
        await ctx.sleep("nap", "1m");
        return ctx.step("work", async () => {
          if (seen.kidBroken) throw new FatalError("kid is broken");
          await seen.kidGoesOn.opened;
          return "kid ok";
        });
      });
      const parent = workflow({ name: "parent-failed-first", version: "1" }, async (ctx) =>
        Promise.all([
          ctx.child("kid", kid, undefined).catch((e: Error) => `caught: ${e.message}`),
          ctx.step("flaky", () => {
            if (seen.parentBroken) throw new FatalError("parent is broken");
            return "parent ok";
          }),
        ]),
      );
      return { seen, kid, parent };
    }

    /** "p" fails, then its kid fails: the kid's failure is kept for "p". */
    async function bothFailed(h: ReturnType<typeof harness>, f: ReturnType<typeof family>) {
      const e = h.engine([f.parent, f.kid]);
      await e.start(f.parent, undefined, { id: "p" });
      await expect(e.handle("p").result()).rejects.toThrow("parent is broken");
      // The kid fails after its parent did; its end is kept for the parent.
      await expect(advanceUntil(h.clock, e.handle("p/kid").result(), 10_000, 100)).rejects.toThrow(
        "kid is broken",
      );
      return e;
    }

    it("hands the resumed parent the child's current outcome, not its stale failure", async () => {
      const h = harness();
      const { seen, ...f } = family();
      const e = await bothFailed(h, { seen, ...f });
      // Resumed by hand, the kid completes: its current outcome.
      seen.kidBroken = false;
      await e.resume("p/kid");
      await expect(advanceUntil(h.clock, e.handle("p/kid").result(), 10_000, 100)).resolves.toBe(
        "kid ok",
      );
      seen.parentBroken = false;
      await e.resume("p");
      await expect(advanceUntil(h.clock, e.handle("p").result(), 10_000, 100)).resolves.toEqual([
        "kid ok",
        "parent ok",
      ]);
    });

    it("has the resumed parent wait for a kid resumed and still running, not take its failure", async () => {
      const h = harness();
      const { seen, ...f } = family();
      const e = await bothFailed(h, { seen, ...f });
      seen.kidBroken = false;
      seen.kidGoesOn = gate();
      await e.resume("p/kid");
      seen.parentBroken = false;
      await e.resume("p");
      // The parent's replay reaches the kid's call; the kid is still at work.
      for (let i = 0; i < 50; i++) {
        await h.clock.advance(1_000);
        await new Promise((r) => setTimeout(r, 2));
      }
      expect((await e.getRun("p"))?.status).not.toBe("completed");
      seen.kidGoesOn.open();
      await expect(advanceUntil(h.clock, e.handle("p").result(), 10_000, 100)).resolves.toEqual([
        "kid ok",
        "parent ok",
      ]);
    });
  },
);
