// The held-delivery swap on waitForEvent, deterministic (the default run's guard; the
// fuzz-found timing repro is test/replay-held-delivery-swap-wait-findings.test.ts, behind
// CAIRN_SOAK).
//
// The first run: "m"'s step and work of the workflow's own are joined; the work is done
// first, so the code after the join runs in "m"'s cascade and waits for "x" ("a"). Then "s"
// is handed over and its code waits for "x" too ("b"). Both events are sent after "s" is
// recorded, while a third branch's step keeps the run from suspending. On the replay the own work (a file read, then a timer) takes longer:
// "m"'s cascade ends without "a"'s wait. Handing "s" over at once let "b" make the first wait
// of "x" and take "a"'s event: events carry no id of the wait they are meant for, so nothing
// refused it before workflow code saw the wrong event. The replay holds "s" back until "a"'s
// wait is made (Context.cascadeOver, DeliveryQueue.hold). On the code before the hold (d7ff879^)
// this fails on both backends: "b got e0, first e1".

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readSelf = () => readFile(new URL(import.meta.url), "utf8");

describe.each(BACKENDS)("%s: a replay holds delivery for a cascade's missing wait", (backend) => {
  const harness = useHarness(backend);

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
          (async () => {
            await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork()]);
            await x("a");
          })(),
          (async () => {
            await ctx.step("s", () => delay(150).then(() => "s"));
            await x("b");
          })(),
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
    const run = await e.start(wf, undefined);
    // Sent once "s" is recorded (both waits are made by then): "a", made first, takes e0. The
    // waits' records follow "s" in the journal.
    await until(
      async () => (await e.getSteps(run.id)).some((c) => c.key === "s" && c.status === "completed"),
      "s is recorded",
    );
    await e.sendEvent(run.id, "x", "e0");
    await e.sendEvent(run.id, "x", "e1");
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits for go");
    expect(Object.fromEntries(got)).toEqual({ a: "e0", b: "e1" });
    firstRun = false;
    await e.sendEvent(run.id, "go");
    const out = await run.result().catch((err: Error) => err.name);
    // Each wait replays its own event, never the other's; a loud refusal is allowed.
    expect(swaps).toEqual([]);
    expect(["done", "NonDeterminismError"]).toContain(out);
  }, 20_000);
});
