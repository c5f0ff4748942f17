// An unref'd setInterval of the workflow code (its code said the timer must not keep the
// process alive) whose callback does I/O every tick (reads a file: a progress poller, a
// metrics flush) kept its run from ever suspending: the timer itself did not count
// (late-work.ts, holdsRunForMs), but the file read each tick began counted as the workflow's
// own pending work for its grace, and the next tick came first. Work begun from an unref'd
// timer's callback no longer holds the run (the replay's checks still count it).

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s: an unref'd setInterval doing I/O each tick", (backend) => {
  const harness = useHarness(backend);

  it("does not keep a run waiting for an event from suspending", async () => {
    const h = harness();
    let reads = 0;
    const wf = workflow({ name: "unrefd-interval-io", version: "1" }, async (ctx) => {
      const t = setInterval(() => {
        void readFile(import.meta.filename).then(() => reads++);
      }, 20);
      t.unref();
      // Once the interval has done I/O (its next tick comes within the I/O's grace).
      const a = await ctx.step("a", async () => {
        while (reads === 0) await new Promise((r) => setTimeout(r, 5));
        return "a";
      });
      const go = await ctx.waitForEvent("go");
      clearInterval(t);
      return { a, go: go.timedOut ? undefined : go.payload };
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    await until(
      async () => (await engine.getRun(run.id))?.status === "waiting",
      "the run suspends on its wait",
    );
    await engine.sendEvent(run.id, "go", 1);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 30_000)).toEqual({
      a: "a",
      go: 1,
    });
  });
});
