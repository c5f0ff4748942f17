// Findings of a review of runs held for a step body that runs on in this worker (past its
// abort's grace). Each test failed on the code it was written against, and stays as the
// regression test of its mend.

import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { deafFailingRun } from "./helpers/deaf-run.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach, failingAtStep, slowBeside } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();

describe.each(BACKENDS)("%s: a run held for a body, once that body ends", (backend) => {
  // Before: a store error under the run while its "slow" body ran past its grace left the
  // run leased to this worker; once that body ended the run still sat, unexecuted, until
  // its lease ran out (a whole lease with nothing of it running anywhere).
  it("is handed back and executed without waiting out its lease", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const { wf, latch, seen } = slowBeside("step", cleanups);
    const { store, state } = failingAtStep(makeStore(), "fast");
    const logs: string[] = [];
    const engine = createEngine({
      store,
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      log: (m) => logs.push(m),
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(() => logs.some((m) => m.includes("still runs here")), "the run held");
    latch.open();
    // The virtual clock stands still: the lease never runs out.
    await until(
      async () => (await engine.getRun("r"))?.status === "completed",
      "the run completed",
      10_000,
    );
    expect({ begun: seen.begun, most: seen.most, failed: state.failed }).toEqual({
      begun: 2,
      most: 1,
      failed: true,
    });
  });
});

describe.each(BACKENDS)("%s: a run released failed while a body of it runs on", (backend) => {
  // Before: "bad" failed the run while "slow" (deaf to its signal) ran past its abort's
  // grace; the run was released failed and the worker forgot that body. A resume made it
  // pending, this worker claimed it at once and began "slow" again beside the first body:
  // one call run twice at the same time.
  it("a resume by hand does not begin the call again beside it", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const { wf, seen, latch } = deafFailingRun("fails-beside", cleanups);
    let claims = 0;
    const engine = createEngine({
      store: around(makeStore(), {
        claimRuns: async (call, ...args) => {
          claims++;
          return call(...args);
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      log: () => {},
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(async () => (await engine.getRun("r"))?.status === "failed", "the run failed");
    expect(seen.running).toBe(1);
    await engine.resume("r");
    // Claim rounds of this worker (the virtual clock stands still), the first body running.
    await until(async () => {
      const run = await engine.getRun("r");
      return run?.status === "running" || seen.begun > 1;
    }, "the resumed run claimed");
    const after = claims;
    await until(() => claims > after + 3 || seen.begun > 1, "claim rounds");
    expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 1, most: 1 });
    latch.open();
    // Once the first body has ended, the run executes without waiting out its lease.
    await until(
      async () => (await engine.getRun("r"))?.status === "completed",
      "the run completed",
      10_000,
    );
    expect({
      begun: seen.begun,
      most: seen.most,
      output: (await engine.getRun("r"))?.output,
    }).toEqual({ begun: 2, most: 1, output: ["slow", "fixed"] });
  });
});

describe.each(BACKENDS)("%s: the orphan hand-back's reads", (backend) => {
  // Before: each orphan's run was read with its own getRun, one after another (a round
  // trip each, in turn). They are read together now.
  it("reads every orphan's run at once", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const wf = workflow({ name: "w", version: "1" }, async (ctx) => ctx.step("s", () => "ok"));
    const client = createEngine({ store: makeStore(), worker: false, clock });
    cleanups.push(() => client.close());
    await client.start(wf, undefined, { id: "r1" });
    await client.start(wf, undefined, { id: "r2" });
    let lost = false;
    const reads = { now: 0, most: 0 };
    const engine = createEngine({
      store: around(makeStore(), {
        // The claim of both runs commits, its answer lost: both become orphans.
        claimRuns: async (call, ...args) => {
          const claimed = (await call(...args)) as unknown[];
          if (claimed.length > 0 && !lost) {
            lost = true;
            throw new Error("connection reset after the commit (injected)");
          }
          return claimed;
        },
        getRun: async (call, ...args) => {
          reads.now++;
          reads.most = Math.max(reads.most, reads.now);
          try {
            await new Promise((r) => setImmediate(r)); // a round trip
            return await call(...args);
          } finally {
            reads.now--;
          }
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => engine.close());
    await until(() => lost, "the claim committed, its answer lost");
    const done = async () =>
      (await client.getRun("r1"))?.status === "completed" &&
      (await client.getRun("r2"))?.status === "completed";
    await until(async () => {
      await clock.advance(10_000); // past the orphans' leases, in time
      return done();
    }, "both runs handed back and completed");
    expect(reads.most).toBe(2);
  });
});
