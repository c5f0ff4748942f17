// Finding, mended with the intent-window swap: an intent carries the window of the
// cascade its call was made in. Here the begun call is a child, not an effect. Branch A
// starts child x (input "a") after step "m" joined with work of its own; branch B starts
// child x (input "b") after step "s". The first run makes A's call inside m's cascade (its
// own work was done), writes its intent and the worker dies while the child runs (300 ms in),
// before s ends. On the replay A's own work takes 300 ms and s 150 ms: without the window, B's call
// (inside s's cascade) was the name's first, found A's intent and child, and was refused as
// another child (NonDeterminismError) though the program is deterministic. Now s's
// hand-over waits until A's call is made again (it is m's cascade's), and B's is x#2.

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const never = () => new Promise<never>(() => {});
const readSelf = () => readFile(new URL(import.meta.url), "utf8");

describe.each(BACKENDS)("%s: a begun child's intent made inside a cascade", (backend) => {
  const harness = useHarness(backend);

  it("is taken again by its own call, not by a later call of its name", async () => {
    const h = harness();
    let firstRun = true;
    let crashed = false;
    let crash = () => {};
    const got: string[] = [];
    const kid = workflow({ name: "intent-window-kid", version: "1" }, async (ctx, id: string) =>
      ctx.step("work", async () => {
        if (firstRun) {
          // Long enough for the parent's intent (written after the child's create) to land.
          await delay(300);
          crash();
          crashed = true;
          return never();
        }
        return id;
      }),
    );
    const wf = workflow(
      { name: "intent-window-parent", version: "1" },
      async (ctx: WorkflowContext) => {
        got.length = 0; // each execution's own (the parent is replayed once a child ends)
        const x = async (id: string) => {
          got.push(`${id}=${await ctx.child("x", kid, id)}`);
        };
        const ownWork = () => (firstRun ? delay(0) : readSelf().then(() => delay(300)));
        await Promise.all([
          (async () => {
            await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork()]);
            await x("a");
          })(),
          (async () => {
            await ctx.step("s", () => (firstRun ? never() : delay(150).then(() => "s")));
            await x("b");
          })(),
        ]);
        return "done";
      },
    );
    const first = crashableEngine(h, [wf, kid]);
    crash = first.crash;
    const run = await first.engine.start(wf, undefined);
    await until(() => crashed, "A's child runs and the worker dies");
    firstRun = false;
    await h.clock.advance(60_000);
    const second = h.engine([wf, kid]);
    const out = await second
      .handle(run.id)
      .result()
      .catch((err: Error) => `${err.name}: ${err.message}`);
    expect(out).toBe("done");
    expect(got.sort()).toEqual(["a=a", "b=b"]);
  }, 30_000);
});
