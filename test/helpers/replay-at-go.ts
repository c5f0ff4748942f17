// The scaffold of the replay tests whose first execution runs until the workflow waits for
// the event "go", and whose replay that event starts (replay-hold-open-handles,
// replay-holds-delivery-for-missing-call, replay-held-network-swap, replay-held-timeout-swap,
// replay-race-won-early-swap, replay-journal-end-swap's later-record case, replay-hops,
// replay-ticks-and-reused-late-names, replay-late-race-winner): the test may flip what the
// workflow reads in between, so the replay's own work or races go otherwise than the first
// execution's.

import { expect } from "vitest";
import {
  type AnyWorkflow,
  type Engine,
  type EngineOptions,
  realClock,
  type WorkflowContext,
  workflow,
} from "../../src/index.js";
import type { Harness } from "./engines.js";
import { until } from "./sqlite.js";

export const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A promise the test resolves (`open`) when the first execution may go on. */
export function gate(): { p: Promise<void>; open: () => void } {
  let open!: () => void;
  const p = new Promise<void>((r) => {
    open = r;
  });
  return { p, open };
}

/** Starts `wf` on `e`, lets `drive` move the first execution along, waits until the run
 *  waits for "go" (a first execution that failed instead fails the test), calls `flip`
 *  (which checks what the first execution did and turns the workflow into its replay), then
 *  sends "go": resolves to the run's result, or the name of the error it ended with. */
export async function replayAtGo(
  e: Engine,
  wf: AnyWorkflow,
  opts: { drive?: (runId: string) => Promise<void>; flip?: () => void } = {},
): Promise<unknown> {
  const run = await e.start(wf, undefined);
  await opts.drive?.(run.id);
  await until(
    async () => ["waiting", "failed"].includes((await e.getRun(run.id))?.status ?? ""),
    "the first run waits for go",
  );
  expect((await e.getRun(run.id))?.status).toBe("waiting");
  opts.flip?.();
  await e.sendEvent(run.id, "go");
  return run.result().catch((err: Error) => err.name);
}

/** The held-delivery program's two branches: "m" is joined with `ownWork()` and then `x("a")`
 *  is called; "s" (150 ms) is handed over next and its code calls `x("b")`. */
export function callsAfterMAndS(
  ctx: WorkflowContext,
  ownWork: () => unknown,
  x: (id: string) => Promise<unknown>,
): Promise<unknown> {
  return Promise.all([
    (async () => {
      await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork()]);
      await x("a");
    })(),
    (async () => {
      await ctx.step("s", () => delay(150).then(() => "s"));
      await x("b");
    })(),
  ]);
}

/** The held-delivery program (replay-holds-delivery-for-missing-call-findings): "m" is joined
 *  with work of the workflow's own and then x ("a") is called; "s" is handed over next and its
 *  code calls x ("b"). The first execution has no own work to wait for (a timer done long
 *  before "m"); the replay waits for `replayWork()`, so "m"'s cascade ends without "a"'s call
 *  and the replay must hold "s" back until it comes. Resolves to the replay's calls of x
 *  ("b=a": b was handed a's value) and how the run ended. */
export async function callAfterOwnWork(
  h: Harness,
  name: string,
  replayWork: () => Promise<unknown>,
  engine: EngineOptions = {},
): Promise<{ got: string[]; outcome: unknown }> {
  let firstRun = true;
  const got: string[] = [];
  const wf = workflow({ name, version: "1" }, async (ctx: WorkflowContext) => {
    const x = async (id: string) => {
      const v = await ctx.step("x", () => delay(300).then(() => id));
      got.push(`${id}=${v}`);
    };
    await callsAfterMAndS(ctx, () => (firstRun ? delay(0) : replayWork()), x);
    await ctx.waitForEvent("go");
    return "done";
  });
  const outcome = await replayAtGo(h.engine([wf], { clock: realClock, ...engine }), wf, {
    flip: () => {
      expect(got).toEqual(["a=a", "b=b"]);
      got.length = 0;
      firstRun = false;
    },
  });
  return { got, outcome };
}

/** An impostor across two windows (replay-held-timeout-swap, replay-held-network-swap).
 *  Branch A joins step "m" with `ownWork()` and then calls x ("x by A"); branch B, after step
 *  "b0", races step "t" (`race(t, firstRun)`) and then calls x ("x by B"). The first
 *  execution is driven by gates: A's own work is done first, then b0 ends, B races, m ends
 *  (A's x is made in m's cascade), then t (B's in t's: t won B's race). In the replay m and t
 *  are handed over at once while A's own work pends, and `race`'s other side may win: B's
 *  call may come first and take A's record, and A's, later, B's. `beforeReplay` runs once
 *  the first execution waits for "go". Resolves to what x handed B in the replay and how the
 *  run ended. */
export async function impostorAcrossWindows(
  h: Harness,
  opts: {
    name: string;
    ownWork: () => Promise<unknown>;
    race: (t: Promise<string>, firstRun: boolean) => Promise<unknown>;
    engine?: EngineOptions;
    beforeReplay?: () => void;
  },
): Promise<{ handedToB: string[]; outcome: unknown }> {
  const g = { b0: gate(), m: gate(), t: gate() };
  const seen = { aJoined: false, bRaced: false };
  let first = true;
  const handedToB: string[] = [];
  const wf = workflow({ name: opts.name, version: "1" }, async (ctx) => {
    const m = ctx.step("m", async () => {
      if (first) await g.m.p;
      return "m";
    });
    const out = await Promise.all([
      (async () => {
        await Promise.all([m, opts.ownWork().then(() => (seen.aJoined = true))]);
        return ctx.step("x", () => "x by A");
      })(),
      (async () => {
        await ctx.step("b0", async () => {
          if (first) await g.b0.p;
          return "b0";
        });
        const t = ctx.step("t", async () => {
          if (first) await g.t.p;
          return "t";
        });
        seen.bRaced = true;
        await opts.race(t, first);
        const x = await ctx.step("x", () => "x by B");
        handedToB.push(x);
        return x;
      })(),
    ]);
    await ctx.waitForEvent("go");
    return out;
  });
  const e = h.engine([wf], { clock: realClock, ...opts.engine });
  const outcome = await replayAtGo(e, wf, {
    drive: async (runId) => {
      await until(async () => seen.aJoined, "A's own work is done");
      g.b0.open();
      await until(async () => seen.bRaced, "B races t");
      g.m.open();
      await until(
        async () => (await e.getSteps(runId)).some((s) => s.key === "x"),
        "A's x is recorded",
      );
      g.t.open();
    },
    flip: () => {
      expect(handedToB).toEqual(["x by B"]);
      handedToB.length = 0;
      first = false;
      opts.beforeReplay?.();
    },
  });
  return { handedToB, outcome };
}
