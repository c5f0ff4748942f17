// A hold whose ending the store failed is sent again with each lease renewal round
// (worker-heartbeat.ts, holdsToEnd) until one answers: a round that fails too (the store
// still down) keeps it for the next. Guards the retry against being dropped after one
// failed round. (A retry after a takeover ends nothing of the newer epoch: the write is
// fenced by worker and epoch, store contract "endHolds ends a hold still the worker's at
// that epoch now".)

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

/** `store`, but its renewLeases that end a hold fail while `down`. */
function holdEndsFailing(store: Store) {
  const state = { down: true, failed: 0 };
  const wrapped = new Proxy(store, {
    get(target, key) {
      if (key === "renewLeases") {
        return async (p: RenewLeases) => {
          if ((p.endHolds?.length ?? 0) === 0 || !state.down) return target.renewLeases(p);
          state.failed++;
          throw new Error("connection reset (test)");
        };
      }
      const v = Reflect.get(target, key);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { store: wrapped, state };
}

describe.each(BACKENDS)("%s: a hold whose ending fails again", (backend) => {
  it("ends with the first round that answers, within the hold's lease", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const { wf, seen, latch } = deafFailingRun("held-end-retried", cleanups);
    const flaky = holdEndsFailing(makeStore());
    const engine = createEngine({
      store: flaky.store,
      workflows: [wf],
      clock,
      leaseMs: LEASE_MS,
      heartbeatMs: LEASE_MS / 6,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      log: () => {},
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(async () => (await engine.getRun("r"))?.status === "failed", "the run failed");
    const other = makeStore();
    await other.open({ clock });
    cleanups.push(() => other.close());
    expect(seen.running).toBe(1);
    const heldUntil = (await other.getRun("r"))?.heldUntil ?? 0;
    latch.open();
    await until(async () => flaky.state.failed === 1, "the hold's ending failed");
    // The next round's retry fails too.
    await clock.advance(LEASE_MS / 6);
    await until(async () => flaky.state.failed === 2, "the retry failed");
    expect((await other.getRun("r"))?.heldBy).toEqual(expect.any(String));
    flaky.state.down = false;
    await clock.advance(LEASE_MS / 6);
    await until(async () => (await other.getRun("r"))?.heldBy === null, "the hold ended", 5_000);
    // Before the hold would have run out: it ended because the retry was sent.
    expect(clock.now()).toBeLessThan(heldUntil);
  });
});
