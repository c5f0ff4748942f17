// An approval answered for one request was handed to another. No crash
// is needed: a run waiting for an approval is replayed when the answer comes. Branch A asks
// approval "x" ({ what: "deploy staging" }) after step "m" joined with work of its own;
// branch B races waitForEvent("q") against a timer that keeps no process alive (unref'd, as
// AbortSignal.timeout's: the run suspends with it pending, and the branch is redone on
// wake-up), then asks approval "x" ({ what: "drop production" }) and, if approved, performs.
// Alice approves "deploy staging". The replay's own work is slower (A's call comes late) and
// B's timer wins: B's call is the name's first, matches A's begun intent (kind and name only;
// the request is not compared, and an intent holds no window), takes the answer event of key
// "x" and is handed "approved": B performs "drop production", and only A's call, made
// later, is refused. Now a late call that finds an intent written inside a cascade waits,
// before it executes, while the workflow's own work may still make calls
// (Context.beforeExecute, at most replayStallMs): A's call comes meanwhile and is refused.
// (The request is still not compared with the one asked: a digest in the intent, compared
// as a child's input is, would refuse B whatever the timing.)
// Deterministic: B's timer is 100 ms on the replay; A's call comes after a file read and 1 s.

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readSelf = () => readFile(new URL(import.meta.url), "utf8");
/** A timer that keeps no process alive (AbortSignal.timeout's kind). */
const unrefDelay = (ms: number) =>
  new Promise<void>((r) => {
    setTimeout(r, ms).unref();
  });

describe.each(BACKENDS)("%s: an approval's answer", (backend) => {
  const harness = useHarness(backend);

  it("is not handed to a call that asks another question", async () => {
    const h = harness();
    let firstRun = true;
    const got: string[] = [];
    const performed: string[] = [];
    const wf = workflow({ name: "approval-swap", version: "1" }, async (ctx: WorkflowContext) => {
      const ask = async (what: string) => {
        const r = await ctx.approval("x", { request: { what } });
        got.push(`${what}: ${r.decision}`);
        return r.approved;
      };
      const ownWork = () => (firstRun ? delay(0) : readSelf().then(() => delay(1000)));
      await Promise.all([
        (async () => {
          await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork()]);
          await ask("deploy staging");
        })(),
        (async () => {
          await Promise.race([ctx.waitForEvent("q"), unrefDelay(firstRun ? 600_000 : 100)]);
          if (await ask("drop production")) {
            await ctx.effect("drop", {
              perform: () => {
                performed.push("dropped production");
                return true;
              },
              reconcile: () => undefined,
            });
          }
        })(),
      ]);
      return "done";
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    const asked = await e.listApprovals(run.id);
    expect(asked.map((a) => a.request)).toEqual([{ what: "deploy staging" }]);
    firstRun = false;
    await e.approve(run.id, "x", { by: "alice" });
    const out = await run.result().catch((err: Error) => err.name);
    // Was: got ["drop production: approved"], performed ["dropped production"], then refused.
    expect(got).not.toContain("drop production: approved");
    expect(performed).toEqual([]);
    expect(out).toBe("NonDeterminismError");
  }, 30_000);
});
