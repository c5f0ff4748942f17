// h5: a run's hold (Release's heldFor: released while a step body of it ran on here) ends
// when that body ends, also when the store failed the first write that ended it, and when
// the engine that holds it closes. Each test failed on the code before its mend.

import { describe, expect, it } from "vitest";
import { createEngine, type Store } from "../src/index.js";
import type { RenewLeases } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { deafFailingRun } from "./helpers/deaf-run.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";

const LEASE_MS = 60_000;
const cleanups = cleanupsAfterEach();

/** `store`, but its first renewLeases that ends a hold fails (a lost write). */
function failingFirstHoldEnd(store: Store): { store: Store; failed: () => number } {
  let failed = 0;
  const wrapped = new Proxy(store, {
    get(target, key) {
      if (key === "renewLeases") {
        return async (p: RenewLeases) => {
          if ((p.endHolds?.length ?? 0) > 0 && failed === 0) {
            failed++;
            throw new Error("connection reset (test)");
          }
          return target.renewLeases(p);
        };
      }
      const v = Reflect.get(target, key);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { store: wrapped, failed: () => failed };
}

describe.each(BACKENDS)("%s: a hold whose ending the store failed", (backend) => {
  // Before: the lost endHold write was only logged; the hold then kept every other worker
  // off the run until it ran out, a whole lease after the body had ended.
  it("ends with the next lease renewal, not a lease later", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const { wf, seen, latch } = deafFailingRun("held-end-lost", cleanups);
    const flaky = failingFirstHoldEnd(makeStore());
    const logged: string[] = [];
    const engine = createEngine({
      store: flaky.store,
      workflows: [wf],
      clock,
      leaseMs: LEASE_MS,
      // No heartbeat by the host's timer within the test: only the clock's moves beat.
      heartbeatMs: LEASE_MS / 2,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      log: (msg) => logged.push(String(msg)),
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(async () => (await engine.getRun("r"))?.status === "failed", "the run failed");
    const other = makeStore();
    await other.open({ clock });
    cleanups.push(() => other.close());
    expect((await other.getRun("r"))?.heldBy).toEqual(expect.any(String));
    expect(seen.running).toBe(1);
    latch.open();
    await until(async () => flaky.failed() === 1, "the hold's ending failed");
    await until(async () => logged.some((m) => m.includes("could not end its hold")), "logged");
    expect((await other.getRun("r"))?.heldBy).toEqual(expect.any(String));
    // One heartbeat's move of the clock, far short of the hold's lease.
    await clock.advance(1_000);
    await until(async () => (await other.getRun("r"))?.heldBy === null, "the hold ended", 5_000);
    expect((await other.resumeRun("r", {})).ok).toBe(true);
    const claimed = await other.claimRuns({
      workerId: "wrk_other",
      workflows: [wf.id],
      limit: 1,
      leaseMs: LEASE_MS,
    });
    expect(claimed.map((c) => c.run.id)).toEqual(["r"]);
  });
});
