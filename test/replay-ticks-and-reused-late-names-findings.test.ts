// An adversarial review of ordered delivery's idle hand-overs (delivery.ts) and the
// late-call check's places (late-work.ts, context.ts madeAfter).

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { type AnyWorkflow, realClock, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { delay, replayAtGo } from "./helpers/replay-at-go.js";

describe.each(BACKENDS)("%s: ordered delivery and reused late names", (backend) => {
  const harness = useHarness(backend);

  // A race begun inside a cascade (after a step) between a step and a branch that lives in
  // a process.nextTick then a microtask (no timer, no I/O: deterministic code). The first
  // run hands the step's outcome over only once its record is written, so the branch wins.
  // A replay found the record at once; the hand-over that follows the cascade's end (a
  // microtask queued from the cascade's closing nextTick) ran before the microtask the
  // workflow's own nextTick queued: the step won, and the run returned another value.
  it("a race begun in a cascade, a nextTick-then-microtask branch against a step, keeps its winner on replay", async () => {
    const h = harness();
    const winners: string[] = [];
    const wf = workflow({ name: "cascade-race-tick", version: "1" }, async (ctx) => {
      await ctx.step("pre", () => 1);
      const branch = new Promise<string>((resolve) =>
        process.nextTick(() => queueMicrotask(() => resolve("branch"))),
      );
      const won = await Promise.race([ctx.step("a", () => "step"), branch]);
      winners.push(won);
      await ctx.waitForEvent("go");
      return won;
    });
    const out = await replayAtGo(h.engine([wf], { clock: realClock }), wf);
    expect(winners[0]).toBe("branch");
    expect(winners).toEqual(winners.map(() => "branch"));
    expect(out).toBe("branch");
  });
  // The same with a branch that alternates ticks and microtasks twice: a fixed number of
  // microtask/nextTick hops before a hand-over (the idle queue's wait) is outrun by a branch
  // that alternates once more, begun late (after the workflow's own file read) or in a
  // cascade. A hand-over now waits for a round in which the workflow code created nothing.
  it.each([
    ["late", "after a file read of its own"],
    ["cascade", "after a step"],
  ])(
    "a race begun %s (%s) between a step and a tick/microtask/tick/microtask branch keeps its winner on replay",
    async (where) => {
      const h = harness();
      const winners: string[] = [];
      const wf = workflow({ name: `race-tmtm-${where}`, version: "1" }, async (ctx) => {
        if (where === "late") await readFile(new URL(import.meta.url));
        else await ctx.step("pre", () => 1);
        const branch = new Promise<string>((resolve) =>
          process.nextTick(() =>
            queueMicrotask(() => process.nextTick(() => queueMicrotask(() => resolve("branch")))),
          ),
        );
        const won = await Promise.race([ctx.step("a", () => "step"), branch]);
        winners.push(won);
        await ctx.waitForEvent("go");
        return won;
      });
      const out = await replayAtGo(h.engine([wf], { clock: realClock }), wf);
      expect(winners[0]).toBe("branch");
      expect(winners).toEqual(winners.map(() => "branch"));
      expect(out).toBe("branch");
    },
  );
  // The late-call check lets a late call reuse a name made earlier in a cascade "at a fixed
  // point" before the code making it began its wait (context.ts, madeAfter). Both halves are
  // judged by timing: a cascade counts as continuing the workflow's own work when a file read
  // began within the last second (LATE_WORK_GRACE_MS), and code joined with a file read gets
  // the place of the cascade it ran in when the read was done first, else (late) the place of
  // its join. A replay runs its cascades at once, so it judged otherwise than the first run:
  // the run below was recorded without complaint and every replay of it (after a suspension,
  // a crash, a restart) failed with NonDeterminismError. A late call that replays a late
  // record, after a call of the name that replays a record made inside a cascade, is now let
  // through: the first run made that same pair and let it through.
  // replayAtGo expects the first run waiting for "go": it accepted the reuse.
  const recordThenReplay = (wf: AnyWorkflow) =>
    replayAtGo(harness().engine([wf], { clock: realClock }), wf);

  it("a name reused after a join and a file read replays although the branch's call was made more than a second after the workflow's first read", async () => {
    const wf = workflow({ name: "late-reuse-grace", version: "1" }, async (ctx) => {
      await readFile(new URL(import.meta.url));
      const [fromB] = await Promise.all([
        (async () => {
          await ctx.step("b0", () => delay(1_200).then(() => "b0"));
          return ctx.step("x", () => "x by B");
        })(),
        ctx.step("other", () => "other"),
      ]);
      await delay(1);
      const after = await ctx.step("x", () => "x after the join");
      await ctx.waitForEvent("go");
      return [fromB, after];
    });
    expect(await recordThenReplay(wf)).toEqual(["x by B", "x after the join"]);
  });

  it("a name reused by code joined with a file read replays although the replay runs that code late", async () => {
    const wf = workflow({ name: "late-reuse-join-read", version: "1" }, async (ctx) => {
      await readFile(new URL(import.meta.url));
      const [fromB, fromL] = await Promise.all([
        (async () => {
          await ctx.step("b0", () => delay(1_200).then(() => "b0"));
          return ctx.step("x", () => "x by B");
        })(),
        (async () => {
          await Promise.all([
            ctx.step("s", () => delay(1_500).then(() => "s")),
            readFile(new URL(import.meta.url)),
          ]);
          await delay(1);
          return ctx.step("x", () => "x by L");
        })(),
        ctx.step("z", () => delay(20).then(() => "z")),
      ]);
      await ctx.waitForEvent("go");
      return [fromB, fromL];
    });
    expect(await recordThenReplay(wf)).toEqual(["x by B", "x by L"]);
  });
});
