// The late-call check (context.ts, beginCall: "cannot tell that this call always comes after")
// refused agent-shaped code whose replay is unambiguous, because the earlier call of the name
// was itself made late (after a file read or a timer), and a late call's place is timing's:
//
// - a helper that reads a file, then makes a step, called in a loop (`await readAndStep(i)`):
//   the caller's `await` resumes where it began, not in the helper's call, so the second
//   call continues from none of the first in the call tree;
// - a helper that makes a step, reads a file, then makes another (plan, read, act) in a loop;
// - a name made late in a branch of a Promise.all, reused after the join (after I/O or not).
//
// Each of those calls is made by code that began its wait (or runs) in a cascade that came
// after the earlier call's outcome was handed over, and outcomes are handed over in the
// recorded order in every execution: the earlier call was made before its outcome could be,
// so before that code, whatever the timing. The check now lets such a call through
// (context.ts, madeAfter and handedOverBefore; the cascade's position in late-work.ts places).
// A pair whose order only timing decides is still refused on its first execution.

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { type AnyWorkflow, NonDeterminismError, realClock, workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readSelf = () => readFile(new URL(import.meta.url), "utf8");

/** Runs `wf` until it waits for "go" (its first execution must accept it), then sends "go":
 *  the execution that finishes it replays every record. */
async function recordThenReplay(h: Harness, wf: AnyWorkflow): Promise<unknown> {
  const e = h.engine([wf], { clock: realClock });
  const run = await e.start(wf, undefined);
  await until(
    async () => ["waiting", "failed"].includes((await e.getRun(run.id))?.status ?? ""),
    "the run waits or fails",
  );
  const first = await e.getRun(run.id);
  expect(first?.error?.message).toBeUndefined();
  expect(first?.status).toBe("waiting");
  await e.sendEvent(run.id, "go");
  return run.result();
}

async function refusal(h: Harness, wf: AnyWorkflow): Promise<unknown> {
  const e = h.engine([wf], { clock: realClock });
  return (await e.start(wf, undefined)).result().catch((x: unknown) => x);
}

const refusedFor = (name: string) =>
  new RegExp(
    `calls step "${name}" again, and cairn cannot tell that this call always comes after the one keyed "${name}(#\\d+)?"`,
  );

describe.each(BACKENDS)("%s: a late call after the earlier call's outcome", (backend) => {
  const harness = useHarness(backend);

  it("a helper that reads a file then makes a step, called in a loop, runs and replays exactly after a crash", async () => {
    const h = harness();
    const bodies: string[] = [];
    let lastStarts = 0;
    const wf = workflow({ name: "read-then-step-helper", version: "1" }, async (ctx) => {
      async function readAndStep(i: number) {
        const text = await readSelf();
        return ctx.step("tool", async () => {
          bodies.push(`tool ${i}`);
          if (i === 2 && ++lastStarts === 1) await new Promise(() => {}); // the worker dies here
          return `tool ${i} read ${text.length > 0}`;
        });
      }
      const out: string[] = [];
      for (let i = 0; i < 3; i++) out.push(await readAndStep(i));
      return out;
    });
    const first = crashableEngine(h, [wf]);
    const run = await first.engine.start(wf, undefined);
    await until(() => lastStarts === 1, "the last tool call runs");
    first.crash();
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    expect(await advanceUntil(h.clock, second.handle(run.id).result(), 30_000)).toEqual([
      "tool 0 read true",
      "tool 1 read true",
      "tool 2 read true",
    ]);
    expect(bodies).toEqual(["tool 0", "tool 1", "tool 2", "tool 2"]);
    const resultAt = new Map((await second.getSteps(run.id)).map((s) => [s.key, s.result]));
    expect(resultAt.get("tool")).toBe("tool 0 read true");
    expect(resultAt.get("tool#2")).toBe("tool 1 read true");
    expect(resultAt.get("tool#3")).toBe("tool 2 read true");
  });

  it("a plan, read, act helper in a loop replays exactly", async () => {
    const wf = workflow({ name: "plan-read-act", version: "1" }, async (ctx) => {
      async function turn(i: number) {
        const plan = await ctx.step("plan", () => `plan ${i}`);
        await readSelf();
        await delay(1);
        return ctx.step("act", () => `${plan}: acted`);
      }
      const out: string[] = [];
      for (let i = 0; i < 3; i++) out.push(await turn(i));
      await ctx.waitForEvent("go");
      return out;
    });
    expect(await recordThenReplay(harness(), wf)).toEqual([
      "plan 0: acted",
      "plan 1: acted",
      "plan 2: acted",
    ]);
  });

  it("a name made late in a branch, reused after the join (with a file read, and without), replays exactly", async () => {
    const wf = workflow({ name: "late-in-branch-then-join", version: "1" }, async (ctx) => {
      const [x1] = await Promise.all([
        (async () => {
          await readSelf();
          return ctx.step("x", () => "x in the branch");
        })(),
        ctx.step("y", () => delay(5).then(() => "y")),
      ]);
      const x2 = await ctx.step("x", () => "x right after the join");
      await readSelf();
      const x3 = await ctx.step("x", () => "x after the join and a read");
      await ctx.waitForEvent("go");
      return [x1, x2, x3];
    });
    expect(await recordThenReplay(harness(), wf)).toEqual([
      "x in the branch",
      "x right after the join",
      "x after the join and a read",
    ]);
  });

  it("a branch's late call made before another branch's step was handed over keeps its key when the replay's timing is the other way round", async () => {
    const h = harness();
    let replay = false;
    const wf = workflow({ name: "handed-before-the-wait", version: "1" }, async (ctx) => {
      const both = await Promise.all([
        (async () => {
          // Its outcome comes after the other branch's "x": a replay hands it over only once
          // that "x" was made again, however slow the other branch is then.
          await ctx.step("a", () => delay(150).then(() => "a"));
          await readSelf();
          return ctx.step("x", () => "x after a");
        })(),
        (async () => {
          await delay(replay ? 300 : 1);
          return ctx.step("x", () => "x of the quick branch");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return both;
    });
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await until(
      async () => ["waiting", "failed"].includes((await e.getRun(run.id))?.status ?? ""),
      "the run waits or fails",
    );
    expect((await e.getRun(run.id))?.status).toBe("waiting");
    replay = true;
    await e.sendEvent(run.id, "go");
    expect(await run.result()).toEqual(["x after a", "x of the quick branch"]);
  });

  it("still refuses a late call of a name another branch also makes late, after outcomes handed over in either order", async () => {
    const wf = workflow({ name: "two-branches-late", version: "1" }, async (ctx) =>
      Promise.all([
        (async () => {
          await ctx.step("a", () => "a");
          await delay(40);
          return ctx.step("x", () => "x of a");
        })(),
        (async () => {
          await ctx.step("b", () => "b");
          await delay(1);
          return ctx.step("x", () => "x of b");
        })(),
      ]),
    );
    const err = await refusal(harness(), wf);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toMatch(refusedFor("x"));
  });

  it("still refuses a late call whose branch began its wait before the other branch's call of the name was handed over", async () => {
    const wf = workflow({ name: "wait-began-before", version: "1" }, async (ctx) =>
      Promise.all([
        (async () => {
          // "a" is handed over at once; the other branch's "x" after its read: which of the
          // two "x" comes first is timing.
          await ctx.step("a", () => "a");
          await delay(60);
          return ctx.step("x", () => "x after a");
        })(),
        (async () => {
          await readSelf();
          return ctx.step("x", () => "x after a read");
        })(),
      ]),
    );
    const err = await refusal(harness(), wf);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toMatch(refusedFor("x"));
  });

  it("still refuses a helper called from concurrent branches, each reading then making the same step", async () => {
    const wf = workflow({ name: "helper-in-branches", version: "1" }, async (ctx) => {
      async function readAndStep(i: number) {
        await readSelf();
        await delay(i * 20);
        return ctx.step("tool", () => `tool ${i}`);
      }
      return Promise.all([readAndStep(1), readAndStep(2)]);
    });
    const err = await refusal(harness(), wf);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toMatch(refusedFor("tool"));
  });
});
