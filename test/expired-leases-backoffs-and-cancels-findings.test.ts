// Findings of a review of leases, crash charges and close() (expireLease, handBackRun,
// Context.crashUnjudged). Each test failed on the code it was written against, and stays
// as the regression test of its mend.

import { describe, expect, it } from "vitest";
import { explainRun } from "../src/cli/explain-run.js";
import { createEngine, type RunView, type Store, type WorkerView, workflow } from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import {
  cleanupsAfterEach,
  closeDeadEngine,
  crashedRun,
  lifecycleLines,
  outcomeOf,
} from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around, gate, lostAttempts } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();

function never(): Promise<never> {
  return new Promise<never>(() => {});
}

describe.each(BACKENDS)(
  "crash charges on %s: a takeover that found the crashed call in its backoff",
  (backend) => {
    // Before: the crash found step "s" in its backoff (its first attempt failed and was
    // recorded): it cut no attempt. The worker that took the run over found that too, and was
    // closed during the backoff; it handed the run back as the crash left it (expireLease).
    // Its next claimer, past the backoff, took the call for one in flight at a crash and
    // charged it a lost attempt that never began: with maxAttempts 2 the run failed with its
    // step run once.
    it("close() during the backoff charges no lost attempt (maxAttempts 2: the step runs twice and completes)", async () => {
      const makeStore = freshStorage(backend, cleanups);
      const clock = createVirtualClock();
      let bodies = 0;
      const retry = { maxAttempts: 2, initialDelay: "10s", jitter: false } as const;
      const crashing = crashableStore(makeStore(), {
        crashAfter: (call) =>
          call.verb === "appendRecords" &&
          (call.args[0] as RunWrite[]).some((w) => w.attempts?.some((a) => a.error)),
      });
      const deadWf = workflow({ name: "backoff", version: "1", retry }, async (ctx) =>
        ctx.step("s", async () => {
          if (crashing.crashed) return never();
          bodies++;
          throw new Error("first attempt fails");
        }),
      );
      const liveWf = workflow({ name: "backoff", version: "1", retry }, async (ctx) =>
        ctx.step("s", () => {
          bodies++;
          return "ran";
        }),
      );
      const a = createEngine({
        store: crashing,
        workflows: [deadWf],
        clock,
        leaseMs: 1_000,
        pollIntervalMs: 10,
        closeGraceMs: 0,
        log: () => {},
      });
      closeDeadEngine(a, cleanups);
      await a.start(deadWf, undefined, { id: "r" });
      await until(() => crashing.crashed, "the worker crashed after recording the failure");
      await crashing.settled();
      await clock.advance(1_500); // past the lease, not past the backoff
      const b = createEngine({
        store: makeStore(),
        workflows: [liveWf],
        clock,
        leaseMs: 1_000,
        pollIntervalMs: 10,
        closeGraceMs: 0,
        inProcessRetryMs: 60_000,
        log: () => {},
      });
      cleanups.push(() => b.close());
      await until(() => clock.pendingTimers() === 1, "the takeover waiting out the backoff");
      await b.close();
      await clock.advance(20_000); // past the backoff
      const c = createEngine({
        store: makeStore(),
        workflows: [liveWf],
        clock,
        pollIntervalMs: 10,
        log: () => {},
      });
      cleanups.push(() => c.close());
      const outcome = await outcomeOf(c, clock);
      expect({
        outcome,
        bodies,
        lost: await lostAttempts(makeStore, "r"),
      }).toEqual({ outcome: "ran", bodies: 2, lost: [] });
    });
  },
);

describe("cairn show / cairn runs: a running run no worker holds", () => {
  // Before: a run whose lease a worker ended (expireLease: a hand-back that keeps a crash to
  // charge, e.g. by `cairn worker` stopping as the only worker) was explained as "running",
  // as though something executed it; nothing does until a worker serving it claims it.
  const now = new Date(Date.UTC(2026, 0, 1, 12));
  const run = {
    id: "r",
    workflow: "crashy",
    version: "1",
    status: "running",
    leaseUntil: now,
  } as unknown as RunView;
  const worker = (workflows: string[], live: boolean) =>
    ({ id: "wrk_1", workflows, live }) as unknown as WorkerView;

  it("says no worker holds it, and who takes it over (or that no worker can)", () => {
    expect(explainRun(run, [], now)).toBe(
      "running, held by no worker (its last one gave it up): no worker is running",
    );
    expect(explainRun(run, [worker(["other@1"], true), worker(["crashy@1"], false)], now)).toBe(
      "running, held by no worker (its last one gave it up): no live worker serves crashy@1",
    );
    expect(explainRun(run, [worker(["crashy@1"], true)], now)).toBe(
      "running, held by no worker (its last one gave it up): the next of 1 live worker(s) serving crashy@1 takes it over",
    );
  });
});

describe.each(BACKENDS)("hand-backs on %s: a crashed run whose cancel was asked", (backend) => {
  // Before: a claim of a crashed run answered after close(); the run had a cancel asked, so
  // whoever takes it releases it canceled without replaying it (the crash's charge is moot).
  // It was handed back as the crash left it all the same (running, its lease ended): with no
  // other worker it stayed running, its cancel not carried out, until a worker came.
  it("a late claim of it after close() ends it canceled at once", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const { clock, wf } = await crashedRun(makeStore, cleanups, { pastLease: false });
    const look = createEngine({ store: makeStore(), worker: false, clock });
    cleanups.push(() => look.close());
    await look.cancel("r", "no longer wanted");
    await clock.advance(60_000); // past the lease
    let claimHeld = false;
    const answer = gate();
    cleanups.push(answer.open);
    const b = createEngine({
      store: around(makeStore(), {
        claimRuns: async (call, ...args) => {
          const claimed = (await call(...args)) as unknown[];
          if (claimed.length > 0) {
            claimHeld = true;
            await answer.opened;
          }
          return claimed;
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: () => {},
    });
    await until(() => claimHeld, "the takeover's claim committed, its answer held");
    await b.close();
    answer.open();
    await until(
      async () => (await look.getRun("r"))?.status === "canceled",
      "the run canceled by the late claim's hand-back",
      5_000,
    );
    expect((await look.getRun("r"))?.reason).toBe("no longer wanted");
  });

  // Before: the cancel came after the takeover's claim (its snapshot said no cancel), while
  // the takeover read the journal; close() then handed the run back as the crash left it
  // (the store's expireLease did not look at cancel_requested): running, no owner, its
  // cancel waiting for a worker to come. The store now refuses to end such a lease, and the
  // hand-back releases it: canceled at once.
  it("a cancel asked during the takeover's journal read: close() ends it canceled at once", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const { clock, wf } = await crashedRun(makeStore, cleanups);
    let reading = false;
    const read = gate();
    cleanups.push(read.open);
    const lines = lifecycleLines();
    const b = createEngine({
      store: around(makeStore(), {
        loadJournal: async (call, ...args) => {
          reading = true;
          await read.opened;
          return call(...args);
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: () => {},
      logger: lines.logger,
    });
    await until(() => reading, "the takeover reading the journal");
    const look = createEngine({ store: makeStore(), worker: false, clock });
    cleanups.push(() => look.close());
    await look.cancel("r", "stop the takeover");
    const closing = b.close();
    read.open();
    await closing;
    await until(
      async () => (await look.getRun("r"))?.status === "canceled",
      "the run canceled by the takeover's hand-back",
      5_000,
    );
    expect((await look.getRun("r"))?.reason).toBe("stop the takeover");
    // Its worker's lifecycle line says so (it said "released", status pending).
    expect(lines.endings()).toEqual([expect.objectContaining({ event: "canceled" })]);
  });
});

describe("createEngine(): a store written before expireLease", () => {
  // Before: a third-party Store written for an earlier cairn (no expireLease) was taken as
  // it was; every hand-back of a run taken over from a crashed worker then failed with a
  // TypeError the hand-back swallowed: an orphan of the worker, retried at each round and
  // failing each time, the run stayed leased to it (a worker never claims its own runs) for
  // as long as that worker lived, and no message named the missing verb.
  it("a worker on it is refused with a TypeError naming expireLease; a client is not", async () => {
    const makeStore = freshStorage("sqlite", cleanups);
    const old = () =>
      new Proxy(makeStore(), {
        get(target, prop, receiver) {
          if (prop === "expireLease") return undefined;
          const value = Reflect.get(target, prop, receiver);
          return typeof value === "function" ? value.bind(target) : value;
        },
      }) as Store;
    const wf = workflow({ name: "w", version: "1" }, async () => "ok");
    expect(() => createEngine({ store: old(), workflows: [wf] })).toThrow(/store.*expireLease/);
    expect(() => createEngine({ store: old(), workflows: [wf] })).toThrow(TypeError);
    const client = createEngine({ store: old(), worker: false });
    cleanups.push(() => client.close());
    expect(await client.listRuns()).toEqual([]);
  });
});
