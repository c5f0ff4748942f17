// a run's hold (Release's heldFor: released while a step body of it ran on here) ends
// when that body ends, also when the store failed the first write that ended it, and when
// the engine that holds it closes. Each test failed on the code before its mend.

import { describe, expect, it } from "vitest";
import { createEngine, type Store, workflow } from "../src/index.js";
import type { RenewLeases } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { deafFailingRun } from "./helpers/deaf-run.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { gate } from "./helpers/store-verbs.js";

const LEASE_MS = 60_000;
const cleanups = cleanupsAfterEach();

/** `store`, but its first renewLeases that ends a hold fails (a lost write; unless `fail`
 *  is false); `unsubscribed` is called as a subscription ends (the worker's, first thing
 *  its close() does). */
function failingFirstHoldEnd(
  store: Store,
  unsubscribed: () => void = () => {},
  fail = true,
): { store: Store; failed: () => number } {
  let failed = fail ? 0 : 1;
  const wrapped = new Proxy(store, {
    get(target, key) {
      if (key === "subscribe") {
        return (listener: Parameters<Store["subscribe"]>[0]) => {
          const off = target.subscribe(listener);
          return () => {
            unsubscribed();
            off();
          };
        };
      }
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
    // Closed with no body running it would end the hold too; it was over before. (Left
    // open, it might claim the resumed run before the other worker.)
    await engine.close();
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

describe.each(BACKENDS)("%s: close() and the holds of its worker", (backend) => {
  /** Two runs released failed and held for a step body running on here, deaf to its abort;
   *  `unsubscribed` and `fail` as for failingFirstHoldEnd. */
  async function twoHeldRuns(unsubscribed?: () => void, fail = true) {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const a = deafFailingRun("held-a", cleanups);
    const b = deafFailingRun("held-b", cleanups);
    const stepBegan = gate();
    const stepMayEnd = gate();
    cleanups.push(stepMayEnd.open);
    const c = workflow({ name: "in-flight", version: "1" }, async (ctx) =>
      ctx.step("s", async () => {
        stepBegan.open();
        await stepMayEnd.opened;
        return 1;
      }),
    );
    const flaky = failingFirstHoldEnd(makeStore(), unsubscribed, fail);
    const engine = createEngine({
      store: flaky.store,
      workflows: [a.wf, b.wf, c],
      clock,
      leaseMs: LEASE_MS,
      heartbeatMs: LEASE_MS / 2,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      closeGraceMs: 60_000,
      log: () => {},
    });
    cleanups.push(() => engine.close());
    await engine.start(a.wf, undefined, { id: "a" });
    await engine.start(b.wf, undefined, { id: "b" });
    const other = makeStore();
    await other.open({ clock });
    cleanups.push(() => other.close());
    for (const id of ["a", "b"]) {
      await until(async () => (await other.getRun(id))?.status === "failed", `${id} failed`);
      expect((await other.getRun(id))?.heldBy).toEqual(expect.any(String));
    }
    return { engine, other, a, b, c, stepBegan, stepMayEnd, flaky };
  }

  // Before: a hold whose ending the store failed waited for the heartbeat's next round,
  // which close() stops; and removeWorker leaves every hold to run out while a body of
  // another run still runs here: the run was kept from every other worker for a lease.
  it("ends a hold whose ending the store failed, while another run's body runs on", async () => {
    const { engine, other, a, flaky } = await twoHeldRuns();
    a.latch.open();
    await until(async () => flaky.failed() === 1, "the hold's ending failed");
    await engine.close();
    expect((await other.getRun("a"))?.heldBy).toBeNull();
    // b's body still runs in the closed engine's process: its hold stays.
    expect((await other.getRun("b"))?.heldBy).toEqual(expect.any(String));
  });

  // Before: a body that ended once close() had begun ended no hold (the worker was closed),
  // and removeWorker left it, as b's body still ran: a kept from other workers for a lease.
  it("ends the hold of a body that ended during close()'s grace", async () => {
    let closing = false;
    const runs = await twoHeldRuns(() => {
      if (closing) runs.a.latch.open();
    }, false);
    const { engine, other, a, c, stepBegan, stepMayEnd } = runs;
    await engine.start(c, undefined, { id: "c" });
    await stepBegan.opened;
    closing = true;
    const closed = engine.close();
    // close() waits its grace for c's step; a's body ends meanwhile, then c's step.
    await until(async () => a.seen.running === 0, "a's body ended");
    await until(async () => true, "a turn of the event loop");
    stepMayEnd.open();
    await closed;
    expect((await other.getRun("a"))?.heldBy).toBeNull();
    expect((await other.getRun("b"))?.heldBy).toEqual(expect.any(String));
  });
});
