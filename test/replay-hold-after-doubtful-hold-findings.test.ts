// A hold after a doubtful hold (Context.cascadeOver). A late call that takes a record made
// inside a cascade while the hand-overs are held keeps the hold while the workflow's own work
// may still make calls, at most replayStallMs (doubtfulCall). Found (h8): such a hold kept on
// past replayStallMs by a pending timer ended with its "waiting since" time left set, and the
// next cascade's hold, for a call the workflow's own work delays, found its replayStallMs
// spent and refused a correct program at once; mended by clearing it whenever a hold ends.
// That repro no longer applies: a doubtful hold whose work is still pending at replayStallMs
// now refuses the run itself (replay-held-timeout-swap-findings). What is left here guards the
// neighbouring shape, a doubtful hold ended by its work (1.2 s) and a second hold whose call
// comes 0.6 s in, with replayStallMs 1.5 s: it replays. It passes without the mend too.

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
        // Pending through the first hold (on the replay), which ends when it fires.
        const slow = own(1200);
        // x is recorded in m's cascade; on the replay it comes late and takes its own record
        // while the hand-overs are held for it: a doubtful hold, which the slow timer keeps.
        await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), own(200)]);
        got.push(await ctx.step("x", () => "x"));
        // y is recorded in x's cascade; on the replay it comes 600 ms after the slow timer fired:
        // within its own hold's replayStallMs, past the first hold's.
        await slow;
        await own(600);
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
