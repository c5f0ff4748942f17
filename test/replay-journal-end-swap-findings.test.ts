// A swap left at the end of a journal. Branch A makes x ("a") after step "m" joined with work
// of its own; branch B races step "q" against a timer of its own, then makes x ("b") and
// performs an effect with what x handed it. The first execution records m and A's x, and its
// worker dies right then (before q, or B's x, has a record). The replay's own work is slower
// (A's x comes late, so the hand-overs are held for it) and B's timer wins: B's call is the
// name's first, takes A's record, and was handed "a" once it released the hold (no later
// record of x told the replay that B's call may be another one, come early); B then performed
// its effect with A's value, and only A's call, which came later with no record, was refused.
// Now a late call that takes a record made inside a cascade while the hand-overs are held
// keeps the hold while the workflow's own work may still make calls (Context.doubtfulCall):
// A's call comes first and is refused before anything of x is handed over.
// Deterministic: B's timer is 100 ms, A's call comes after a file read and 500 ms.
// The same early call took A's record when B's later call had a record, made late: only a
// later record made inside a cascade kept the hold. And a late call that does own the record
// still replays, at the end of a journal too (it waits for the workflow's other own work).
// A ctx.uuid() is handed its recorded value at once, so an early one holds A's value before
// any verdict: B's effect performed with it. New calls now wait while such a call may hold
// another's record, as they wait for a stalled recorded call.

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import {
  crashAfterRecordThenReplay,
  delay,
  journalEndSwap,
  never,
  outcome,
  ownWork,
  REFUSED_UNSWAPPED,
  raceOwnTimer,
  readThenDelay,
  swaps,
} from "./helpers/crash-replay.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { replayAtGo } from "./helpers/replay-at-go.js";

const readSelf = () => readFile(new URL(import.meta.url), "utf8");

describe.each(BACKENDS)("%s: a swap at the end of a journal", (backend) => {
  const harness = useHarness(backend);

  it("a late call taking a held record is not handed its value while another call of the name may come", async () => {
    // A's own work in the replay: a file read and 500 ms.
    expect(await journalEndSwap(harness(), "journal-end-swap", () => readThenDelay(500))).toEqual(
      REFUSED_UNSWAPPED,
    );
  }, 30_000);

  it("a late call taking a held record is not handed its value when the name's later record was made late", async () => {
    const h = harness();
    let firstRun = true;
    const got: string[] = [];
    const wf = workflow({ name: "late-later-swap", version: "1" }, async (ctx: WorkflowContext) => {
      const x = async (id: string) => {
        const v = await ctx.step("x", () => delay(5).then(() => id));
        got.push(`${id}=${v}`);
      };
      const m = ctx.step("m", () => delay(50).then(() => "m"));
      await Promise.all([
        (async () => {
          await Promise.all([m, firstRun ? undefined : readSelf().then(() => delay(500))]);
          await x("a");
        })(),
        (async () => {
          await m;
          // In m's cascade, after A's x on the first run: B's late x comes after it there.
          for (let i = 0; i < 5; i++) await undefined;
          await delay(firstRun ? 200 : 100);
          await x("b");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return "done";
    });
    const out = await replayAtGo(h.engine([wf], { clock: realClock }), wf, {
      flip: () => {
        expect(got).toEqual(["a=a", "b=b"]);
        got.length = 0;
        firstRun = false;
      },
    });
    expect(swaps(got)).toEqual([]);
    expect(out).toBe("NonDeterminismError");
  }, 20_000);

  it("a late call that owns the held record replays at the end of a journal", async () => {
    const h = harness();
    const got: string[] = [];
    const { runId, replay } = await crashAfterRecordThenReplay(
      h,
      (c) =>
        workflow({ name: "journal-end-owner", version: "1" }, async (ctx: WorkflowContext) => {
          const x = async (id: string) => {
            const v = await ctx.step("x", () => delay(5).then(() => id));
            got.push(`${id}=${v}`);
          };
          await Promise.all([
            (async () => {
              await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork(c, 300)]);
              await x("a");
              if (c.firstRun) c.crash();
            })(),
            (async () => {
              await ctx.step("s", () => (c.firstRun ? never() : delay(150).then(() => "s")));
              await x("b");
            })(),
          ]);
          return "done";
        }),
      { crashed: "A's x is recorded and the worker dies", beforeReplay: () => (got.length = 0) },
    );
    expect(await replay.handle(runId).result()).toBe("done");
    expect(got).toEqual(["a=a", "b=b"]);
    const steps = await replay.getSteps(runId);
    expect(steps.map((s) => `${s.key}=${s.result}`).sort()).toEqual(["m=m", "s=s", "x#2=b", "x=a"]);
  }, 30_000);

  it("a new call is not made with a ctx.uuid() value that an early late call took from the held record", async () => {
    const h = harness();
    const got: string[] = [];
    const performed: string[] = [];
    const { runId, replay } = await crashAfterRecordThenReplay(
      h,
      (c) =>
        workflow({ name: "journal-end-uuid", version: "1" }, async (ctx: WorkflowContext) => {
          await Promise.all([
            (async () => {
              await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork(c, 500)]);
              got.push(`a:${ctx.uuid("x")}`);
              if (c.firstRun) {
                // The uuid's record is written once its cascade is over: then the worker dies.
                await delay(200);
                c.crash();
              }
            })(),
            (async () => {
              await raceOwnTimer(ctx, c);
              const u = ctx.uuid("x");
              got.push(`b:${u}`);
              await ctx.effect("send", {
                perform: () => {
                  performed.push(u);
                  return u;
                },
                reconcile: () => undefined,
              });
            })(),
          ]);
          return "done";
        }),
      {
        crashed: "the uuid is recorded and the worker dies",
        beforeReplay: async (id) => {
          const recorded = (await h.engine([], { worker: false }).getSteps(id)).find(
            (s) => s.key === "@uuid:x",
          );
          expect(`a:${recorded?.result}`).toBe(got[0]);
        },
      },
    );
    const out = await outcome(replay, runId);
    expect(performed).toEqual([]);
    const steps = await replay.getSteps(runId);
    expect(steps.filter((s) => s.key === "send")).toEqual([]);
    expect(out).toBe("NonDeterminismError");
  }, 30_000);
});
