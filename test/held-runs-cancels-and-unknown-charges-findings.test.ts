// Findings of an adversarial review of the worker's lifecycle (runs held while a step body of
// them still runs in this process; crash charges kept through a pause or a lost claim). Each
// test failed on the code it was written against, and stays as the regression test of its
// mend.

import { describe, expect, it } from "vitest";
import { UndecodableError } from "../src/codec/codec.js";
import { createEngine, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import {
  chargesACrash,
  cleanupsAfterEach,
  crashedRun,
  failingAtStep,
  lifecycleLines,
  outcomeUnderNewWorker,
  roundsPastLease,
} from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around, lostAttempts } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();

describe.each(BACKENDS)("%s: a run held for a body that runs on", (backend) => {
  // Before: a store error under an execution whose step had timed out (its body, ignoring
  // its signal, never settles; the Context had retried the call beside it already) kept
  // the run leased to this worker for as long as that body ran: for good. With no other
  // worker the run never resumed.
  it("a body its step's timeout gave up on does not hold the run for good", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    let begun = 0;
    const wf = workflow({ name: "timed", version: "1" }, async (ctx) => {
      const a = await ctx.step(
        "slow",
        async () => {
          begun++;
          if (begun === 1) return new Promise<string>(() => {}); // hangs, deaf to its signal
          return "slow";
        },
        { timeout: 1_000, retry: { maxAttempts: 3, initialDelay: 1, maxDelay: 1, jitter: false } },
      );
      const b = await ctx.step("after", async () => "after");
      return [a, b];
    });
    const { store, state } = failingAtStep(makeStore(), "after");
    const engine = createEngine({
      store,
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      log: () => {},
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(() => begun === 1, "the first body began");
    await clock.advance(1_000); // its timeout
    await until(async () => {
      await clock.advance(10); // the retry's backoff
      return state.failed;
    }, "the store failed under the run");
    await roundsPastLease(clock, () => state.claims, 4);
    const run = await engine.getRun("r");
    expect({ status: run?.status, output: run?.output }).toEqual({
      status: "completed",
      output: ["slow", "after"],
    });
  });
});

describe.each(BACKENDS)("%s: a cancel of a run held for a body that runs on", (backend) => {
  // Before: a store error under an execution whose step body (deaf to its signal) never
  // settles kept the run leased to this worker, and the orphan hand-back skipped it while
  // that body ran: a cancel asked meanwhile never ended the run (with no other worker, it
  // stayed running with its cancel asked for good). Released canceled, nothing of it runs
  // again, so the body need not be waited for.
  it("ends it canceled", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    let begun = 0;
    const wf = workflow({ name: "deaf", version: "1" }, async (ctx) =>
      Promise.all([
        ctx.step("slow", async () => {
          begun++;
          return new Promise<string>(() => {}); // hangs, deaf to its signal
        }),
        ctx.step("fast", async () => {
          await until(() => begun > 0, "slow began");
          return "fast";
        }),
      ]),
    );
    const { store, state } = failingAtStep(makeStore(), "fast");
    const logs: string[] = [];
    const lines = lifecycleLines();
    const engine = createEngine({
      store,
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      log: (m) => logs.push(m),
      logger: lines.logger,
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(() => logs.some((m) => m.includes("still runs here")), "the run held");
    await engine.cancel("r", "no longer wanted");
    await roundsPastLease(clock, () => state.claims, 3);
    const run = await engine.getRun("r");
    expect({ status: run?.status, begun }).toEqual({ status: "canceled", begun: 1 });
    // Its worker's lifecycle line says so (not "released", to pending).
    expect(lines.endings()).toEqual([expect.objectContaining({ event: "canceled" })]);
  });
});

describe.each(BACKENDS)(
  "%s: a takeover paused after its crash's charge landed unheard",
  (backend) => {
    // Before: a run taken over from a crashed worker charged that crash (a WORKER_LOST
    // attempt, written, its answer an error: a value that cannot be decoded), and was paused
    // for it; the journal, read to learn whether the charge had landed, could not be read
    // either, and the pause marked the run crash_unjudged all the same. Resumed, its next
    // claim charged the crash again: the step (maxAttempts 2) failed with WorkerLostError after
    // one crash, its body run once.
    it("is not marked to be charged that crash again", async () => {
      const makeStore = freshStorage(backend, cleanups);
      const { clock, wf, bodies } = await crashedRun(makeStore, cleanups, {
        retry: { maxAttempts: 2 },
      });
      let charged = false;
      const b = createEngine({
        store: around(makeStore(), {
          appendRecords: async (call, ...args) => {
            const res = await call(...args);
            if (!charged && chargesACrash(args[0])) {
              charged = true;
              throw new UndecodableError("cannot decode a value (injected)");
            }
            return res;
          },
          loadJournal: async (call, ...args) => {
            if (charged) throw new UndecodableError("cannot decode a step's result (injected)");
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
      const outcome = await outcomeUnderNewWorker(makeStore, wf, clock, cleanups, { resume: true });
      expect({ outcome, bodies: bodies(), lost: await lostAttempts(makeStore, "r") }).toEqual({
        outcome: "ran",
        bodies: 2,
        lost: ["s"],
      });
    });
  },
);
