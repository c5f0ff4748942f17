// NOT MENDED (it.fails until it is). The held hand-over waits only for work the workflow's own code began
// that late-work.ts still counts: a timer until it fires, anything else (a file read, a child
// process, a socket) for a second's grace after it began. A late call that takes a record
// made inside a cascade while the hand-overs are held keeps the hold only that long
// (Context.doubtfulCall). A branch that runs a command in workflow code (execFile, 3 s)
// before its call outlasts the grace: the hold ends, and the call of another branch, come
// early from a race its own timer won, is handed the record's value (A's) and performs an
// effect with it; the owner's call, when it comes, is refused, after the effect.
// The journal ends right after A's record (its worker dies then), as in
// replay-journal-end-swap-findings, whose own work (a file read, then a timer) the hold sees.
// Deterministic: B's timer is 100 ms, the grace 1 s, the command 3 s.

import { execFile } from "node:child_process";
import { describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const never = () => new Promise<never>(() => {});
const command = () => new Promise<void>((r) => execFile("sleep", ["3"], () => r()));

describe.each(BACKENDS)("%s: a held record's owner waiting for a command", (backend) => {
  const harness = useHarness(backend);

  it.fails("is not swapped with an early call of its name, nor an effect performed with its value", async () => {
    const h = harness();
    let firstRun = true;
    let crashed = false;
    let crash = () => {};
    const got: string[] = [];
    const performed: string[] = [];
    const wf = workflow({ name: "command-swap", version: "1" }, async (ctx: WorkflowContext) => {
      const x = async (id: string) => {
        const v = await ctx.step("x", () => delay(5).then(() => id));
        got.push(`${id}=${v}`);
        return v;
      };
      await Promise.all([
        (async () => {
          // The first run's command was done before m; the replay's takes 3 s.
          await Promise.all([
            ctx.step("m", () => delay(50).then(() => "m")),
            firstRun ? undefined : command(),
          ]);
          await x("a");
          if (firstRun) {
            crash();
            crashed = true;
          }
        })(),
        (async () => {
          const timer = firstRun ? never() : delay(100);
          const q = ctx.step("q", () => (firstRun ? never() : delay(400).then(() => "q")));
          await Promise.race([q, timer]);
          const v = await x("b");
          await ctx.effect("send", {
            perform: () => {
              performed.push(`b sent ${v}`);
              return v;
            },
            reconcile: () => undefined,
          });
        })(),
      ]);
      return "done";
    });
    const first = crashableEngine(h, [wf]);
    crash = first.crash;
    const run = await first.engine.start(wf, undefined);
    await until(() => crashed, "A's x is recorded and the worker dies");
    expect(got).toEqual(["a=a"]);
    got.length = 0;
    firstRun = false;
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    const out = await second
      .handle(run.id)
      .result()
      .catch((err: Error) => err.name);
    // Was: got ["b=a"], performed ["b sent a"], then refused at A's call.
    expect(got.filter((g) => g.split("=")[0] !== g.split("=")[1])).toEqual([]);
    expect(performed).toEqual([]);
    expect(out).toBe("NonDeterminismError");
  }, 30_000);
});
