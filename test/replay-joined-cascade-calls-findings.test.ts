// False refusals of the late-call check on a replay (h5). Code that joins a step with a file
// read (`Promise.all`) runs in the step's cascade when the read was done first, else late.
// The first run's step took a while, so the read was done and the code ran inside the
// cascade; a replay hands the recorded step over at once and finds the read unfinished, so
// the same code runs late. The check of a name reused by two calls (context.ts, beginCall)
// judged that code as made late and refused runs its first execution accepted: every replay
// (after a suspension, a crash, a restart) failed with NonDeterminismError. Found by
// late-call-swap-fuzz-wide (_CALL=wait: about a third of accepted programs' replays, on
// both backends; all of them this check). Each run below is accepted by its first execution
// and must replay with each call of the reused name handed its own value.

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { type AnyWorkflow, realClock, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readSelf = () => readFile(new URL(import.meta.url), "utf8");

describe.each(BACKENDS)("%s: a replay of calls joined with a file read", (backend) => {
  const harness = useHarness(backend);

  /** Runs `wf` until it waits for "go" (its first execution accepted it), then replays it. */
  async function recordThenReplay(wf: AnyWorkflow) {
    const h = harness();
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await until(
      async () => ["waiting", "failed"].includes((await e.getRun(run.id))?.status ?? ""),
      "the run waits",
    );
    expect((await e.getRun(run.id))?.status).toBe("waiting");
    await e.sendEvent(run.id, "go");
    return run.result();
  }

  it("a call made in a later cascade after a joined call the replay makes late", async () => {
    // First run: "m" (pos 0) runs A's x in its cascade (the read was done), "t" (pos 1) runs
    // B's x#2 in its own. Replay: A's x is made late, after the read; B's x#2 in t's cascade
    // was refused (A's call late, its outcome not handed over yet).
    const wf = workflow({ name: "joined-then-later-cascade", version: "1" }, async (ctx) => {
      const out = await Promise.all([
        (async () => {
          await Promise.all([ctx.step("m", () => delay(100).then(() => "m")), readSelf()]);
          return ctx.step("x", () => delay(400).then(() => "x by A"));
        })(),
        (async () => {
          await ctx.step("t", () => delay(250).then(() => "t"));
          return ctx.step("x", () => "x by B");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return out;
    });
    expect(await recordThenReplay(wf)).toEqual(["x by A", "x by B"]);
  });

  it("a joined call the replay makes late after a call made in an earlier cascade", async () => {
    // First run: "t" (pos 0) runs A's x in its cascade, "m" (pos 1) runs B's x#2 in its own
    // (the read was done). Replay: B's x#2 is made late, after the read, and was refused (A's
    // call is no ancestor, its outcome not handed over yet).
    const wf = workflow({ name: "cascade-then-joined", version: "1" }, async (ctx) => {
      const out = await Promise.all([
        (async () => {
          await ctx.step("t", () => delay(100).then(() => "t"));
          return ctx.step("x", () => delay(600).then(() => "x by A"));
        })(),
        (async () => {
          await Promise.all([ctx.step("m", () => delay(250).then(() => "m")), readSelf()]);
          return ctx.step("x", () => "x by B");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return out;
    });
    expect(await recordThenReplay(wf)).toEqual(["x by A", "x by B"]);
  });

  it("a joined call the replay makes late after a late call whose outcome came before", async () => {
    // First run: A's x is made late (after a timer) and handed over (pos 0) before "m" (pos 1),
    // whose cascade runs B's x#2 (its timer and read were done): after x's hand-over, so
    // accepted. Replay: B's join awaits its timer and read, begun in the start's cascade, so
    // B's x#2 is made late with that older place, and was refused.
    const wf = workflow({ name: "late-then-joined", version: "1" }, async (ctx) => {
      const out = await Promise.all([
        (async () => {
          await delay(50);
          return ctx.step("x", () => "x by A");
        })(),
        (async () => {
          await Promise.all([
            ctx.step("m", () => delay(1000).then(() => "m")),
            delay(150).then(readSelf),
          ]);
          return ctx.step("x", () => "x by B");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return out;
    });
    expect(await recordThenReplay(wf)).toEqual(["x by A", "x by B"]);
  });

  it("two calls joined in one cascade that the replay makes late in the other order are refused, not swapped", async () => {
    // Not a false refusal: both were made inside m's cascade on the first run, A's first;
    // the replay makes both late, B's timer first. Their windows are one, so the order is
    // timing's: B's call would take A's record. The replay must refuse before handing over.
    const wf = workflow({ name: "joined-same-cascade", version: "1" }, async (ctx) => {
      const m = ctx.step("m", () => delay(200).then(() => "m"));
      const out = await Promise.all([
        (async () => {
          await Promise.all([m, delay(60)]);
          return ctx.step("x", () => "x by A");
        })(),
        (async () => {
          await Promise.all([m, delay(5)]);
          return ctx.step("x", () => "x by B");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return out;
    });
    const out = await recordThenReplay(wf).catch((err: Error) => err.name);
    expect(out).toBe("NonDeterminismError");
  });
});
