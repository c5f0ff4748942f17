// A hold after a doubtful hold that ran its course (Context.cascadeOver). A late call that
// takes a record made inside a cascade while the hand-overs are held keeps the hold while the
// workflow's own work may still make calls, at most replayStallMs (doubtfulCall). That hold
// ended with its "waiting since" time left set (it is cleared only by a cascade with nothing to
// wait for), so the next cascade's hold, for a call the workflow's own work delays, found its
// replayStallMs already spent and refused the run at once: a correct program (a timer of its
// own pending longer than replayStallMs, as an uncleared race timeout is) was failed with
// NonDeterminismError ("the journal recorded step "y" ... which the code did not call at that
// point") though y came 200 ms later. It replayed before the doubtful hold (fbf4a58).
// Deterministic: the replay's own work is a file read and timers; replayStallMs is 1.5 s, the
// pending timer 1.7 s.

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readSelf = () => readFile(new URL(import.meta.url), "utf8");

describe.each(BACKENDS)("%s: a hold after a doubtful hold", (backend) => {
  const harness = useHarness(backend);

  it("waits for its own call for replayStallMs of its own", async () => {
    const h = harness();
    let firstRun = true;
    const got: string[] = [];
    const wf = workflow(
      { name: "hold-after-doubtful", version: "1" },
      async (ctx: WorkflowContext) => {
        const own = (ms: number) => (firstRun ? delay(0) : readSelf().then(() => delay(ms)));
        // Pending through the first hold, past replayStallMs (on the replay).
        const slow = own(1700);
        // x is recorded in m's cascade; on the replay it comes late and takes its own record
        // while the hand-overs are held for it: a doubtful hold, which the slow timer keeps.
        await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), own(200)]);
        got.push(await ctx.step("x", () => "x"));
        // y is recorded in x's cascade; on the replay it comes once the slow timer fires.
        await slow;
        got.push(await ctx.step("y", () => "y"));
        await ctx.waitForEvent("go");
        return "done";
      },
    );
    const e = h.engine([wf], { clock: realClock, replayStallMs: 1500 });
    const run = await e.start(wf, undefined);
    await until(
      async () => ["waiting", "failed"].includes((await e.getRun(run.id))?.status ?? ""),
      "the first run waits for go",
    );
    expect((await e.getRun(run.id))?.status).toBe("waiting");
    const steps = await e.getSteps(run.id);
    expect(steps.map((s) => s.key)).toEqual(["m", "x", "y", "go"]);
    firstRun = false;
    got.length = 0;
    await e.sendEvent(run.id, "go");
    const out = await run.result().catch((err: Error) => `${err.name}: ${err.message}`);
    expect(out).toBe("done");
    expect(got).toEqual(["x", "y"]);
  }, 20_000);
});
