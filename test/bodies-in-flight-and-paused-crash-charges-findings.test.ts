// Findings of a review of the worker's lifecycle: a run given up while a step body of
// it still runs in this process, and crash charges lost by a pause or a lost claim. Each
// test failed on the code it was written against, and stays as the regression test of its
// mend.

import { afterEach, describe, expect, it } from "vitest";
import { UndecodableError } from "../src/codec/codec.js";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { advanceUntil } from "./helpers/engines.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { tempDbPath, until } from "./helpers/sqlite.js";
import { around, gate } from "./helpers/store-verbs.js";

const pgUrl = await postgresTestUrl();
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Backend = { name: string; makeStore: () => Store };

function sqliteBackend(): Backend {
  const { path, cleanup } = tempDbPath();
  cleanups.push(cleanup);
  return { name: "sqlite", makeStore: () => sqliteStore(path) };
}

function postgresBackend(): Backend {
  const { schema, drop } = testSchema(pgUrl!, "cairn_bodies");
  cleanups.push(drop);
  return { name: "postgres", makeStore: () => postgresStore(pgUrl!, { schema }) };
}

const backends: Array<[string, () => Backend]> = [["SQLite", sqliteBackend]];
if (pgUrl) backends.push(["PostgreSQL", postgresBackend]);

/** A workflow whose call "slow" (a step, or an effect's perform) waits for `latch` in its
 *  body, beside a step "fast" that ends once "slow" has begun; it counts the bodies of "slow" begun and how many ran at
 *  once. */
function slowBeside(kind: "step" | "effect") {
  const latch = gate();
  const began = gate();
  const seen = { begun: 0, running: 0, most: 0 };
  const slowBody = async () => {
    seen.begun++;
    began.open();
    seen.running++;
    seen.most = Math.max(seen.most, seen.running);
    try {
      await latch.opened;
    } finally {
      seen.running--;
    }
    return "slow";
  };
  const wf = workflow({ name: `slow-${kind}`, version: "1" }, async (ctx) =>
    Promise.all([
      kind === "step"
        ? ctx.step("slow", slowBody)
        : ctx.effect("slow", { perform: slowBody, reconcile: () => undefined }),
      // Ends once "slow" has begun (an effect's perform begins after its intent's write).
      ctx.step("fast", async () => {
        await began.opened;
        return "fast";
      }),
    ]),
  );
  cleanups.push(latch.open);
  return { wf, latch, seen };
}

/** Whether a write records step `key`. */
function writesStep(args: unknown[], key: string): boolean {
  const writes = args[0] as Array<{ steps?: Array<{ key: string }> }>;
  return writes.some((w) => w.steps?.some((s) => s.key === key));
}

describe.each(backends)("%s: a run given up while a body of it still runs here", (_, backend) => {
  // Before: the store error failing the record of "fast" handed the run back to pending at
  // once, and this same worker claimed it again and began "slow" a second time while its
  // first body still ran: one call's side effect performed twice at the same time.
  for (const kind of ["step", "effect"] as const) {
    it(`a store error: the ${kind} still running is not begun again beside it`, async () => {
      const { makeStore } = backend();
      const clock = createVirtualClock();
      const { wf, latch, seen } = slowBeside(kind);
      let failed = false;
      let claims = 0;
      const logs: string[] = [];
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
      });
      cleanups.push(() => engine.close());
      await engine.start(wf, undefined, { id: "r" });
      await until(
        () => seen.begun > 1 || logs.some((m) => m.includes("still runs here")),
        "the run begun again, or kept while its body runs",
      );
      // Past the lease, with claim rounds: the run stays with the body that runs here.
      await clock.advance(60_000);
      const after = claims;
      await until(() => claims > after + 3, "claim rounds past the lease");
      expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 1, most: 1 });
      latch.open();
      const result = engine.handle("r").result();
      expect(await advanceUntil(clock, result, 1_000, 200)).toEqual(["slow", "fast"]);
      // Its record was never written: the next execution performs it again, after the first.
      expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 2, most: 1 });
    });
  }

  // Before: a run taken over by another worker (this one stopped by its own heartbeat, its
  // body still running) and given back came to this worker again, which executed it and
  // began the call beside its own first body.
  it("a run that comes back through another worker waits for the body still running here", async () => {
    const { makeStore } = backend();
    const clock = createVirtualClock();
    const a = slowBeside("step");
    const b = slowBeside("step");
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
    for (let i = 0; i < 3; i++) {
      await clock.advance(40_000);
      const now = claims;
      await until(() => claims > now + 2 || a.seen.begun > 1, "claim rounds of A");
    }
    expect({ begun: a.seen.begun, most: a.seen.most, inB: b.seen.begun }).toEqual({
      begun: 1,
      most: 1,
      inB: 0,
    });
    a.latch.open();
    const result = engineA.handle("r").result();
    expect(await advanceUntil(clock, result, 1_000, 200)).toEqual(["slow", "fast"]);
    expect({ begun: a.seen.begun, most: a.seen.most }).toEqual({ begun: 2, most: 1 });
  });

  // Before: an execution stopped by its own heartbeat (no renewal for a whole lease) left
  // the run an orphan, handed back once its lease expired and claimed again by this worker
  // while the first body still ran.
  it("a lease judged stale: the run is not handed back while its body runs", async () => {
    const { makeStore } = backend();
    const clock = createVirtualClock();
    const { wf, latch, seen } = slowBeside("step");
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
    for (let i = 0; i < 3; i++) {
      await clock.advance(40_000);
      const now = claims;
      await until(() => claims > now + 2 || seen.begun > 1, "claim rounds");
    }
    expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 1, most: 1 });
    renewalsFail = false;
    latch.open();
    const result = engine.handle("r").result();
    expect(await advanceUntil(clock, result, 1_000, 200)).toEqual(["slow", "fast"]);
    expect(seen.most).toBe(1);
  });
});

/** A run "r" of workflow "crashy" (one step, maxAttempts 1) whose worker crashed in the
 *  step's body; the clock is past its lease. `bodies()`: how often the body ran. */
async function crashedRun(makeStore: () => Store) {
  const clock = createVirtualClock();
  let bodies = 0;
  const hang = gate();
  const wf = workflow({ name: "crashy", version: "1", retry: { maxAttempts: 1 } }, async (ctx) =>
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
  cleanups.push(hang.open);
  await a.start(wf, undefined, { id: "r" });
  await until(() => crashing.crashed, "the worker crashed in the step");
  await crashing.settled();
  await clock.advance(60_000); // past the lease
  return { clock, wf, bodies: () => bodies };
}

describe.each(backends)("%s: a crashed run paused as unserved", (_, backend) => {
  // Before: markUnserved paused the run (its worker dead, no live worker of its version)
  // and forgot it had been running: the worker that served the version later claimed it as
  // an ordinary run, charged the crash nothing, and the step (maxAttempts 1) ran twice.
  it("keeps its crash's charge for the worker that serves its version later", async () => {
    const { makeStore } = backend();
    const { clock, wf, bodies } = await crashedRun(makeStore);
    // A worker of another workflow only: its sweep pauses "r" (no live worker has crashy@1).
    const other = workflow({ name: "other", version: "1" }, async () => 1);
    const b = createEngine({ store: makeStore(), workflows: [other], clock, pollIntervalMs: 10 });
    cleanups.push(() => b.close());
    await until(async () => (await b.getRun("r"))?.status === "paused", "the run paused");
    await b.close();
    const c = createEngine({ store: makeStore(), workflows: [wf], clock, pollIntervalMs: 10 });
    cleanups.push(() => c.close());
    const result = c
      .handle("r")
      .result()
      .then(
        (v) => v,
        (e: Error) => e.name,
      );
    const outcome = await advanceUntil(clock, result, 1_000, 200);
    expect({ outcome, bodies: bodies() }).toEqual({ outcome: "WorkerLostError", bodies: 1 });
  });
});

describe.each(backends)("%s: a crashed run paused for a payload it cannot read", (_, backend) => {
  // Before: the takeover met a stored value it could not decode before its replay charged
  // the crash, and paused the run as any other: resumed once repaired, the run was claimed
  // as an ordinary one, the crash charged nothing, and the step (maxAttempts 1) ran twice.
  it("keeps its crash's charge for the execution after the resume", async () => {
    const { makeStore } = backend();
    const { clock, wf, bodies } = await crashedRun(makeStore);
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
    expect({ outcome, bodies: bodies() }).toEqual({ outcome: "WorkerLostError", bodies: 1 });
  });
});

describe.each(backends)("%s: a claim of a crashed run whose answer was lost", (_, backend) => {
  // Before: the claim committed (taking the run over from the crashed worker) but its answer
  // never came; the worker found the run leased to it and, not knowing whether the claim
  // had taken it from a crash, handed it back to pending once its lease expired: claimed
  // next as an ordinary run, the crash was charged nothing and the step (maxAttempts 1) ran
  // twice. The store remembers what the claim found, and the hand-back asks it.
  it("keeps the crash's charge", async () => {
    const { makeStore } = backend();
    const { clock, wf, bodies } = await crashedRun(makeStore);
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
    const result = b
      .handle("r")
      .result()
      .then(
        (v) => v,
        (e: Error) => e.name,
      );
    const outcome = await advanceUntil(clock, result, 1_000, 200);
    expect({ outcome, bodies: bodies() }).toEqual({ outcome: "WorkerLostError", bodies: 1 });
  });
});
