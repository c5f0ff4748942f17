// Findings of a review of the worker's lifecycle: a run given up while a step body of
// it still runs in this process, and crash charges lost by a pause or a lost claim. Each
// test failed on the code it was written against, and stays as the regression test of its
// mend.

import { describe, expect, it } from "vitest";
import { UndecodableError } from "../src/codec/codec.js";
import { createEngine, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import {
  cleanupsAfterEach,
  crashedRun,
  failingAtStep,
  outcomeOf,
  outcomeUnderNewWorker,
  roundsPastLease,
  slowBeside,
} from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();

describe.each(BACKENDS)("%s: a run given up while a body of it still runs here", (backend) => {
  // Before: the store error failing the record of "fast" handed the run back to pending at
  // once, and this same worker claimed it again and began "slow" a second time while its
  // first body still ran: one call's side effect performed twice at the same time.
  for (const kind of ["step", "effect"] as const) {
    it(`a store error: the ${kind} still running is not begun again beside it`, async () => {
      const makeStore = freshStorage(backend, cleanups);
      const clock = createVirtualClock();
      const { wf, latch, seen } = slowBeside(kind, cleanups);
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
      await until(
        () => seen.begun > 1 || logs.some((m) => m.includes("still runs here")),
        "the run begun again, or kept while its body runs",
      );
      // Past the lease, with claim rounds: the run stays with the body that runs here.
      await clock.advance(60_000);
      const after = state.claims;
      await until(() => state.claims > after + 3, "claim rounds past the lease");
      expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 1, most: 1 });
      latch.open();
      expect(await outcomeOf(engine, clock)).toEqual(["slow", "fast"]);
      // Its record was never written: the next execution performs it again, after the first.
      expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 2, most: 1 });
    });
  }

  // Before: a run taken over by another worker (this one stopped by its own heartbeat, its
  // body still running) and given back came to this worker again, which executed it and
  // began the call beside its own first body.
  it("a run that comes back through another worker waits for the body still running here", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const a = slowBeside("step", cleanups);
    const b = slowBeside("step", cleanups);
    let renewalsFail = false;
    let renewalFailed = false;
    let claims = 0;
    const engineA = createEngine({
      store: around(makeStore(), {
        renewLeases: async (call, ...args) => {
          if (renewalsFail) {
            renewalFailed = true;
            throw new Error("connection reset (injected)");
          }
          return call(...args);
        },
        claimRuns: async (call, ...args) => {
          claims++;
          return call(...args);
        },
      }),
      workflows: [a.wf],
      clock,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      log: () => {},
    });
    cleanups.push(() => engineA.close());
    await engineA.start(a.wf, undefined, { id: "r" });
    await until(() => a.seen.begun === 1, "the slow body began in A");
    renewalsFail = true;
    // A's heartbeat fails past the lease: it stops executing the run (its body runs on).
    await clock.advance(40_000);
    await until(() => renewalFailed, "A's renewal failed");
    renewalsFail = false;
    // B takes the run over and, its store failing, gives it back as the crash left it.
    let bFailed = false;
    const engineB = createEngine({
      store: around(makeStore(), {
        loadJournal: async () => {
          bFailed = true;
          throw new Error("connection reset (injected)");
        },
      }),
      workflows: [b.wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => engineB.close());
    await until(() => bFailed, "B took the run over and its store failed");
    await engineB.close();
    // A claims it again (its lease ended): claim rounds, past the lease.
    await roundsPastLease(
      clock,
      () => claims,
      3,
      () => a.seen.begun > 1,
    );
    expect({ begun: a.seen.begun, most: a.seen.most, inB: b.seen.begun }).toEqual({
      begun: 1,
      most: 1,
      inB: 0,
    });
    a.latch.open();
    expect(await outcomeOf(engineA, clock)).toEqual(["slow", "fast"]);
    expect({ begun: a.seen.begun, most: a.seen.most }).toEqual({ begun: 2, most: 1 });
  });

  // Before: an execution stopped by its own heartbeat (no renewal for a whole lease) left
  // the run an orphan, handed back once its lease expired and claimed again by this worker
  // while the first body still ran.
  it("a lease judged stale: the run is not handed back while its body runs", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const { wf, latch, seen } = slowBeside("step", cleanups);
    let renewalsFail = false;
    let claims = 0;
    const engine = createEngine({
      store: around(makeStore(), {
        renewLeases: async (call, ...args) => {
          if (renewalsFail) throw new Error("connection reset (injected)");
          return call(...args);
        },
        claimRuns: async (call, ...args) => {
          claims++;
          return call(...args);
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      leaseMs: 30_000,
      log: () => {},
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(() => seen.begun === 1, "the slow body began");
    renewalsFail = true;
    // Past the lease: the next heartbeat fails, and this worker stops executing the run.
    for (let i = 0; i < 5; i++) await clock.advance(40_000);
    const after = claims;
    await until(() => claims > after + 3 || seen.begun > 1, "claim rounds past the lease");
    await roundsPastLease(
      clock,
      () => claims,
      3,
      () => seen.begun > 1,
    );
    expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 1, most: 1 });
    renewalsFail = false;
    latch.open();
    expect(await outcomeOf(engine, clock)).toEqual(["slow", "fast"]);
    expect(seen.most).toBe(1);
  });
});

describe.each(BACKENDS)("%s: a crashed run paused as unserved", (backend) => {
  // Before: markUnserved paused the run (its worker dead, no live worker of its version)
  // and forgot it had been running: the worker that served the version later claimed it as
  // an ordinary run, charged the crash nothing, and the step (maxAttempts 1) ran twice.
  it("keeps its crash's charge for the worker that serves its version later", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const { clock, wf, bodies } = await crashedRun(makeStore, cleanups, {
      retry: { maxAttempts: 1 },
    });
    // A worker of another workflow only: its sweep pauses "r" (no live worker has crashy@1).
    const other = workflow({ name: "other", version: "1" }, async () => 1);
    const b = createEngine({ store: makeStore(), workflows: [other], clock, pollIntervalMs: 10 });
    cleanups.push(() => b.close());
    await until(async () => (await b.getRun("r"))?.status === "paused", "the run paused");
    await b.close();
    const outcome = await outcomeUnderNewWorker(makeStore, wf, clock, cleanups);
    expect({ outcome, bodies: bodies() }).toEqual({ outcome: "WorkerLostError", bodies: 1 });
  });
});

describe.each(BACKENDS)("%s: a crashed run paused for a payload it cannot read", (backend) => {
  // Before: the takeover met a stored value it could not decode before its replay charged
  // the crash, and paused the run as any other: resumed once repaired, the run was claimed
  // as an ordinary one, the crash charged nothing, and the step (maxAttempts 1) ran twice.
  it("keeps its crash's charge for the execution after the resume", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const { clock, wf, bodies } = await crashedRun(makeStore, cleanups, {
      retry: { maxAttempts: 1 },
    });
    let unreadable = true;
    const b = createEngine({
      store: around(makeStore(), {
        loadJournal: async (call, ...args) => {
          if (unreadable) throw new UndecodableError("cannot decode a step's result (injected)");
          return call(...args);
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => b.close());
    await until(async () => (await b.getRun("r"))?.status === "paused", "the run paused");
    await b.close();
    unreadable = false;
    const outcome = await outcomeUnderNewWorker(makeStore, wf, clock, cleanups, { resume: true });
    expect({ outcome, bodies: bodies() }).toEqual({ outcome: "WorkerLostError", bodies: 1 });
  });
});

describe.each(BACKENDS)("%s: a claim of a crashed run whose answer was lost", (backend) => {
  // Before: the claim committed (taking the run over from the crashed worker) but its answer
  // never came; the worker found the run leased to it and, not knowing whether the claim
  // had taken it from a crash, handed it back to pending once its lease expired: claimed
  // next as an ordinary run, the crash was charged nothing and the step (maxAttempts 1) ran
  // twice. The store remembers what the claim found, and the hand-back asks it.
  it("keeps the crash's charge", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const { clock, wf, bodies } = await crashedRun(makeStore, cleanups, {
      retry: { maxAttempts: 1 },
    });
    let lost = false;
    const b = createEngine({
      store: around(makeStore(), {
        claimRuns: async (call, ...args) => {
          const claimed = (await call(...args)) as unknown[];
          if (claimed.length > 0 && !lost) {
            lost = true;
            throw new Error("connection reset after the commit (injected)");
          }
          return claimed;
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => b.close());
    await until(() => lost, "the claim committed, its answer lost");
    const outcome = await outcomeOf(b, clock);
    expect({ outcome, bodies: bodies() }).toEqual({ outcome: "WorkerLostError", bodies: 1 });
  });
});
