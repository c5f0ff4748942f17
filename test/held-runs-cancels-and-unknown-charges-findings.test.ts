// Findings of an adversarial review of the worker's lifecycle (runs held while a step body of
// them still runs in this process; crash charges kept through a pause or a lost claim). Each
// test failed on the code it was written against, and stays as the regression test of its
// mend.

import { afterEach, describe, expect, it } from "vitest";
import { UndecodableError } from "../src/codec/codec.js";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { createVirtualClock, type VirtualClock } from "../src/testing/index.js";
import { advanceUntil } from "./helpers/engines.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { tempDbPath, until } from "./helpers/sqlite.js";
import { around, gate, lostAttempts } from "./helpers/store-verbs.js";

const pgUrl = await postgresTestUrl();
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Backend = { makeStore: () => Store };

function sqliteBackend(): Backend {
  const { path, cleanup } = tempDbPath();
  cleanups.push(cleanup);
  return { makeStore: () => sqliteStore(path) };
}

function postgresBackend(): Backend {
  const { schema, drop } = testSchema(pgUrl!, "cairn_held");
  cleanups.push(drop);
  return { makeStore: () => postgresStore(pgUrl!, { schema }) };
}

const backends: Array<[string, () => Backend]> = [["SQLite", sqliteBackend]];
if (pgUrl) backends.push(["PostgreSQL", postgresBackend]);

/** Whether a write records step `key`. */
function writesStep(args: unknown[], key: string): boolean {
  const writes = args[0] as Array<{ steps?: Array<{ key: string }> }>;
  return writes.some((w) => w.steps?.some((s) => s.key === key));
}

/** Advances the clock past a lease `times` times, each followed by claim rounds. */
async function roundsPastLease(
  clock: VirtualClock,
  claims: () => number,
  times = 3,
  stop: () => boolean = () => false,
): Promise<void> {
  for (let i = 0; i < times && !stop(); i++) {
    await clock.advance(40_000);
    const now = claims();
    await until(() => claims() > now + 2 || stop(), "claim rounds");
  }
}

describe.each(backends)("%s: a run held for a body that runs on", (_, backend) => {
  // Before: a store error under an execution whose step had timed out (its body, ignoring
  // its signal, never settles; the Context had retried the call beside it already) kept
  // the run leased to this worker for as long as that body ran: for good. With no other
  // worker the run never resumed.
  it("a body its step's timeout gave up on does not hold the run for good", async () => {
    const { makeStore } = backend();
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
    let failed = false;
    let claims = 0;
    const logs: string[] = [];
    const engine = createEngine({
      store: around(makeStore(), {
        appendRecords: async (call, ...args) => {
          if (!failed && writesStep(args, "after")) {
            failed = true;
            throw new Error("connection reset (injected)");
          }
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
      log: (m) => logs.push(m),
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(() => begun === 1, "the first body began");
    await clock.advance(1_000); // its timeout
    await until(async () => {
      await clock.advance(10); // the retry's backoff
      return failed;
    }, "the store failed under the run");
    await roundsPastLease(
      clock,
      () => claims,
      4,
      () => false,
    );
    const run = await engine.getRun("r");
    expect({ status: run?.status, output: run?.output }).toEqual({
      status: "completed",
      output: ["slow", "after"],
    });
  });
});

describe.each(backends)("%s: a cancel of a run held for a body that runs on", (_, backend) => {
  // Before: a store error under an execution whose step body (deaf to its signal) never
  // settles kept the run leased to this worker, and the orphan hand-back skipped it while
  // that body ran: a cancel asked meanwhile never ended the run (with no other worker, it
  // stayed running with its cancel asked for good). Released canceled, nothing of it runs
  // again, so the body need not be waited for.
  it("ends it canceled", async () => {
    const { makeStore } = backend();
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
    let failed = false;
    let claims = 0;
    const logs: string[] = [];
    const events: Array<{ event: string; status?: string }> = [];
    const engine = createEngine({
      store: around(makeStore(), {
        appendRecords: async (call, ...args) => {
          if (!failed && writesStep(args, "fast")) {
            failed = true;
            throw new Error("connection reset (injected)");
          }
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
      log: (m) => logs.push(m),
      logger: {
        debug: () => {},
        info: (f) => events.push(f as { event: string; status?: string }),
        warn: () => {},
        error: () => {},
      },
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await until(() => logs.some((m) => m.includes("still runs here")), "the run held");
    await engine.cancel("r", "no longer wanted");
    await roundsPastLease(clock, () => claims, 3);
    const run = await engine.getRun("r");
    expect({ status: run?.status, begun }).toEqual({ status: "canceled", begun: 1 });
    // Its worker's lifecycle line says so (not "released", to pending).
    expect(events.filter((e) => e.event === "canceled" || e.event === "released")).toEqual([
      expect.objectContaining({ event: "canceled" }),
    ]);
  });
});

describe.each(backends)(
  "%s: a takeover paused after its crash's charge landed unheard",
  (_, backend) => {
    // Before: a run taken over from a crashed worker charged that crash (a WORKER_LOST
    // attempt, written, its answer an error: a value that cannot be decoded), and was paused
    // for it; the journal, read to learn whether the charge had landed, could not be read
    // either, and the pause marked the run crash_unjudged all the same. Resumed, its next
    // claim charged the crash again: the step (maxAttempts 2) failed with WorkerLostError after
    // one crash, its body run once.
    it("is not marked to be charged that crash again", async () => {
      const { makeStore } = backend();
      const clock = createVirtualClock();
      let bodies = 0;
      const hang = gate();
      cleanups.push(hang.open);
      const wf = workflow(
        { name: "crashy", version: "1", retry: { maxAttempts: 2 } },
        async (ctx) =>
          ctx.step("s", async () => {
            bodies++;
            if (bodies === 1) {
              crashing.crash();
              await hang.opened;
            }
            return "ran";
          }),
      );
      const crashing = crashableStore(makeStore());
      const a = createEngine({
        store: crashing,
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
        closeGraceMs: 0,
        log: () => {},
      });
      cleanups.push(() => a.close().catch(() => {}));
      await a.start(wf, undefined, { id: "r" });
      await until(() => crashing.crashed, "the worker crashed in the step");
      await crashing.settled();
      await clock.advance(60_000); // past the lease
      let charged = false;
      const b = createEngine({
        store: around(makeStore(), {
          appendRecords: async (call, ...args) => {
            const writes = args[0] as Array<{
              attempts?: Array<{ error?: { code?: string } | null }>;
            }>;
            const res = await call(...args);
            const charge = writes.some((w) =>
              w.attempts?.some((x) => x.error?.code === "WORKER_LOST"),
            );
            if (!charged && charge) {
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
      const c = createEngine({ store: makeStore(), workflows: [wf], clock, pollIntervalMs: 10 });
      cleanups.push(() => c.close());
      await c.resume("r");
      const result = c
        .handle("r")
        .result()
        .then(
          (v) => v,
          (e: Error) => e.name,
        );
      const outcome = await advanceUntil(clock, result, 1_000, 200);
      expect({ outcome, bodies, lost: await lostAttempts(makeStore, "r") }).toEqual({
        outcome: "ran",
        bodies: 2,
        lost: ["s"],
      });
    });
  },
);
