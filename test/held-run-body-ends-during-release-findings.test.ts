// Finding: a run released held for a step body (Release's heldFor) keeps that hold for a
// whole lease when the body ends while the release is being written: the execution then
// ends with no body in flight, so the worker never looks at the hold again (bodyLeftRunning
// ends a hold only for a body still running when the execution ends), and no other worker
// may claim the run though nothing of it runs anywhere.

import { describe, expect, it } from "vitest";
import { createEngine } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { deafFailingRun } from "./helpers/deaf-run.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

const LEASE_MS = 60_000;
const cleanups = cleanupsAfterEach();

describe.each(BACKENDS)("%s: a hold whose body ends while the release is written", (backend) => {
  it("ends with the body: another worker may claim the run at once", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const { wf: deaf, seen, latch } = deafFailingRun("held-release-body-ends", cleanups);
    const store = around(makeStore(), {
      releaseRun: async (call, ...args) => {
        const release = args[0] as { heldFor?: unknown };
        if (release.heldFor !== undefined) {
          // The body ends while the release (which holds the run for it) is on its way.
          latch.open();
          await until(() => seen.running === 0, "the body ended", 5_000);
          await new Promise((r) => setTimeout(r, 20));
        }
        return call(...args);
      },
    });
    const engine = createEngine({
      store,
      workflows: [deaf],
      clock,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      leaseMs: LEASE_MS,
      log: () => {},
    });
    cleanups.push(() => engine.close());
    await engine.start(deaf, undefined, { id: "r" });
    await until(async () => (await engine.getRun("r"))?.status === "failed", "the run failed");
    const other = makeStore();
    await other.open({ clock });
    cleanups.push(() => other.close());
    // The virtual clock stands still: only the body's end can end the hold.
    await until(async () => (await other.getRun("r"))?.heldBy === null, "the hold ended", 5_000);
    // The hold ended while this engine's worker lives; it goes now, or it would race the
    // other worker for the resumed run (its hint or poll wakes it, and on PostgreSQL the
    // other claim skips a row its claim has locked). Not earlier: close() ends holds too.
    await engine.close();
    expect((await other.resumeRun("r", {})).ok).toBe(true);
    const claimed = await other.claimRuns({
      workerId: "wrk_other",
      workflows: [deaf.id],
      limit: 1,
      leaseMs: LEASE_MS,
    });
    expect(claimed.map((c) => c.run.id)).toEqual(["r"]);
  });
});
