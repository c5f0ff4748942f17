// Findings of the generative replay test's non-deterministic programs.
//
// A. A replay whose function returned without making a call the first run made after its
//    own I/O (a late call) waits up to replayStallMs for it before failing the run with
//    NonDeterminismError. Meanwhile a wait still pending (a race's loser waiting for an event
//    never sent) let the run suspend as `waiting` for that event: the divergence was never
//    judged, and the run waited for ever, neither failed nor done (nd-ip:15094 in
//    test/replay-generative.test.ts: a labelled ctx.now() left out on the replay). A function
//    that has settled decides how the run ends: its execution no longer suspends.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The run once it has ended, or as it is after `ms` (real time). */
async function settled<R extends { status: string }>(
  read: () => Promise<R | undefined>,
  ms: number,
): Promise<R | undefined> {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = await read();
    if (r?.status === "failed" || r?.status === "completed" || Date.now() > deadline) return r;
    await delay(20);
  }
}

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("A: a late call left out on a replay fails the run, though a race's loser still waits", async () => {
    const h = harness();
    let executions = 0;
    const wf = workflow({ name: "late-skip", version: "1" }, async (ctx) => {
      const first = ++executions === 1;
      // The loser waits for an event nobody sends: it stays a wait after the race.
      await Promise.race([ctx.waitForEvent("never"), ctx.step("winner", () => "w")]);
      await delay(1); // the workflow's own I/O: the calls below are made late
      if (first) ctx.now("drawn"); // left out by the replay
      await ctx.step("after", () => 1);
      await ctx.sleep("nap", 10); // the run suspends here, and is replayed on waking
      return "done";
    });
    const engine = h.engine([wf], { replayStallMs: 200 });
    const run = await engine.start(wf, undefined);
    await until(async () => (await engine.getRun(run.id))?.status === "waiting", "the nap");
    await h.clock.advance(10);
    await until(() => executions >= 2, "the replay");
    // The replay judges the missing call after replayStallMs (200 ms); before the mend it
    // suspended as waiting for "never" instead, for good.
    const ended = await settled(() => engine.getRun(run.id), 5_000);
    expect(ended?.status).toBe("failed");
    expect(ended?.error).toMatchObject({ code: "NON_DETERMINISM" });
    expect(ended?.error?.message).toContain('"@now:drawn"');
  });
});
