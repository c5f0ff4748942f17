// A replay holds the next recorded outcome back while a cascade's recorded call is missing.
//
// The first run: "m"'s step and work of the workflow's own (a file read, then a timer) are
// joined; the work is done first, so the code after the join runs in "m"'s cascade and calls
// x ("a", key x). Then "s" is handed over and its code calls x ("b", key x#2). On the replay
// the own work takes longer: "m"'s cascade ends without the call of "a". Handing "s" over at
// once (the bug) let "b" make the first call of x and take "a"'s record and value, silently
// (the read left "s"'s cascade window loose, so no window check stood in the way). The replay
// now holds "s" back until "a"'s call is made (Context.cascadeOver, DeliveryQueue.hold).
// Deterministic: x's body outlasts "s"'s in the first run (so "s" is handed over right after
// "m" on the replay), and the replay's timer outlasts the hand-over of "m" by far.
//
// The same swap on waitForEvent (the default run's guard; the fuzz-found timing repro is
// test/replay-held-delivery-swap-wait-findings.test.ts, behind CAIRN_SOAK): "a" and "b" wait
// for "x" instead, and both events are sent once "s" is recorded, while a third branch's step
// keeps the first run from suspending. "b" took "a"'s event: events carry no id of the wait
// they are meant for, so nothing refused it before workflow code saw the wrong event. On the
// code before the hold (d7ff879^) this fails on both backends: "b got e0, first e1".

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { callAfterOwnWork, callsAfterMAndS, delay, replayAtGo } from "./helpers/replay-at-go.js";
import { until } from "./helpers/sqlite.js";

const readSelf = () => readFile(new URL(import.meta.url), "utf8");

describe.each(BACKENDS)(
  "%s: a replay holds delivery for a cascade's missing call or wait",
  (backend) => {
    const harness = useHarness(backend);

    it("the next outcome's code does not take the record of a call made after own work", async () => {
      // A timer alone on the first run, done long before "m"; a read, then a timer the replay
      // waits for, on the replay (the read leaves the later cascades' windows loose).
      const { got, outcome } = await callAfterOwnWork(harness(), "held-for-missing-call", () =>
        readSelf().then(() => delay(300)),
      );
      // Each call replays its own value, never the other's. Once "a" is made late, "b" is
      // checked as a late call's neighbour (madeAfter) and may be refused: a loud refusal, which
      // a first run whose read was slower gives too.
      expect(got.filter((g) => g.split("=")[0] !== g.split("=")[1])).toEqual([]);
      expect(["done", "NonDeterminismError"]).toContain(outcome);
    }, 20_000);

    it("the next outcome's code does not take the event of a wait made after own work", async () => {
      const h = harness();
      let firstRun = true;
      const got = new Map<string, unknown>();
      const swaps: string[] = [];
      const wf = workflow(
        { name: "held-for-missing-wait", version: "1" },
        async (ctx: WorkflowContext) => {
          const x = async (id: string) => {
            const ev = await ctx.waitForEvent("x");
            const v = ev.timedOut ? "timed out" : ev.payload;
            if (firstRun) got.set(id, v);
            else if (got.get(id) !== v) swaps.push(`${id} got ${v}, first ${got.get(id)}`);
          };
          const ownWork = () => (firstRun ? delay(0) : readSelf().then(() => delay(300)));
          await Promise.all([
            callsAfterMAndS(ctx, ownWork, x),
            // Keeps the first run from suspending while both waits wait for their events.
            ctx.step("keep", async () => {
              while (got.size < 2) await delay(10);
              return "kept";
            }),
          ]);
          await ctx.waitForEvent("go");
          return "done";
        },
      );
      const e = h.engine([wf], { clock: realClock });
      const out = await replayAtGo(e, wf, {
        // Sent once "s" is recorded (both waits are made by then): "a", made first, takes e0.
        // The waits' records follow "s" in the journal.
        drive: async (runId) => {
          await until(
            async () =>
              (await e.getSteps(runId)).some((c) => c.key === "s" && c.status === "completed"),
            "s is recorded",
          );
          await e.sendEvent(runId, "x", "e0");
          await e.sendEvent(runId, "x", "e1");
        },
        flip: () => {
          expect(Object.fromEntries(got)).toEqual({ a: "e0", b: "e1" });
          firstRun = false;
        },
      });
      // Each wait replays its own event, never the other's; a loud refusal is allowed.
      expect(swaps).toEqual([]);
      expect(["done", "NonDeterminismError"]).toContain(out);
    }, 20_000);
  },
);
