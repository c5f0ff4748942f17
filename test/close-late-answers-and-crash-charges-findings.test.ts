// Findings of a review of the worker's lifecycle (close(), hand-backs, the accounting of
// lost attempts). Each test failed on the code it was written against, and stays as the
// regression test of its mend.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { createVirtualClock, faultyStore } from "../src/testing/index.js";
import { advanceUntil } from "./helpers/engines.js";
import { closeDeadEngine, crashedRun, outcomeOf } from "./helpers/lifecycle.js";
import { tempDbPath, until } from "./helpers/sqlite.js";
import { around, gate, lostAttempts } from "./helpers/store-verbs.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
function dbPath(): string {
  const { path, cleanup } = tempDbPath();
  cleanups.push(cleanup);
  return path;
}

describe("close(): work still in flight when its bound ends", () => {
  // Before: close() waited for a claim round in flight at most its bound (at least 2 s),
  // then closed the store. A claim answered after that was handed back on a closed store,
  // which failed: the run stayed leased to a worker that was gone until its lease ended,
  // and its next claimer, taking it for a crash, charged its first call a lost attempt
  // (with maxAttempts 1 the run failed without its step ever running).
  it("a claim answered after close() returned hands its run back (pending)", async () => {
    const path = dbPath();
    const clock = createVirtualClock();
    let bodies = 0;
    const once = workflow(
      { name: "once", version: "1", retry: { maxAttempts: 1 } },
      async (ctx, n: number) =>
        ctx.step("s", () => {
          bodies++;
          return n;
        }),
    );
    let hold = false;
    let claimHeld = false;
    const answer = gate();
    const store = around(sqliteStore(path), {
      claimRuns: async (call, ...args) => {
        const claimed = (await call(...args)) as unknown[];
        if (hold && claimed.length > 0) {
          claimHeld = true;
          await answer.opened;
        }
        return claimed;
      },
    });
    const logged: string[] = [];
    const engine = createEngine({
      store,
      workflows: [once],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: (m) => logged.push(m),
    });
    await engine.listRuns();
    const client = createEngine({ store: sqliteStore(path), worker: false, clock });
    cleanups.push(() => client.close());
    hold = true;
    await client.start("once@1", 5, { id: "late" });
    await until(() => claimHeld, "the claim committed, its answer held");
    await engine.close();
    answer.open();
    await until(
      async () => (await client.getRun("late"))?.status === "pending",
      "the late claim's run handed back",
      5_000,
    );
    expect(logged.filter((m) => m.includes("handing back"))).toEqual([]);
    const next = createEngine({
      store: sqliteStore(path),
      workflows: [once],
      clock,
      pollIntervalMs: 10,
    });
    cleanups.push(() => next.close());
    await expect(advanceUntil(clock, next.handle("late").result(), 1_000, 200)).resolves.toBe(5);
    expect(bodies).toBe(1);
    expect(await lostAttempts(path, "late")).toEqual([]);
  });

  // Before: the same for a start() whose create, claimed by this worker, answered after
  // close()'s bound: the run stayed leased to the gone worker.
  it("a start() whose claimed create answers after close() returned hands its run back", async () => {
    const path = dbPath();
    const clock = createVirtualClock();
    let bodies = 0;
    const once = workflow(
      { name: "once", version: "1", retry: { maxAttempts: 1 } },
      async (ctx, n: number) =>
        ctx.step("s", () => {
          bodies++;
          return n;
        }),
    );
    const answer = gate();
    let createHeld = false;
    const store = around(sqliteStore(path), {
      createRun: async (call, ...args) => {
        const made = await call(...args);
        if ((args[0] as { claimBy?: unknown }).claimBy !== undefined) {
          createHeld = true;
          await answer.opened;
        }
        return made;
      },
    });
    const logged: string[] = [];
    const engine = createEngine({
      store,
      workflows: [once],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: (m) => logged.push(m),
    });
    await engine.listRuns();
    const started = engine.start(once, 4, { id: "made" });
    started.catch(() => {});
    await until(() => createHeld, "the create committed, its answer held");
    await engine.close();
    answer.open();
    const client = createEngine({ store: sqliteStore(path), worker: false, clock });
    cleanups.push(() => client.close());
    await until(
      async () => (await client.getRun("made"))?.status === "pending",
      "the run created claimed handed back",
      5_000,
    );
    expect(logged.filter((m) => m.includes("handing back"))).toEqual([]);
    const next = createEngine({
      store: sqliteStore(path),
      workflows: [once],
      clock,
      pollIntervalMs: 10,
    });
    cleanups.push(() => next.close());
    await expect(advanceUntil(clock, next.handle("made").result(), 1_000, 200)).resolves.toBe(4);
    expect(bodies).toBe(1);
    expect(await lostAttempts(path, "made")).toEqual([]);
  });

  // Before: a child's create that had not answered when close()'s bound ended kept its
  // parent leased to the gone worker until the lease ended; its next claimer took it for
  // a crash and charged a lost attempt to a parallel step that close() had kept from
  // starting (with maxAttempts 1 the run failed, the step never run).
  it("a child create answered after close() returned hands its parent back; no step is charged", async () => {
    const path = dbPath();
    const clock = createVirtualClock();
    let sBodies = 0;
    let aStarted = false;
    const aGate = gate();
    const createGate = gate();
    let createHeld = false;
    const kid = workflow({ name: "kid", version: "1" }, async (ctx) => ctx.step("work", () => 1));
    const parent = workflow(
      { name: "parent", version: "1", retry: { maxAttempts: 1 } },
      async (ctx) => {
        const [c, s] = await Promise.all([
          ctx.child("c", kid, undefined),
          (async () => {
            await ctx.step("a", async () => {
              aStarted = true;
              await aGate.opened;
              return 0;
            });
            return ctx.step("s", () => {
              sBodies++;
              return 2;
            });
          })(),
        ]);
        return c + s;
      },
    );
    const store = around(sqliteStore(path), {
      createRun: async (call, ...args) => {
        if ((args[0] as { id: string }).id === "p/c") {
          createHeld = true;
          await createGate.opened;
        }
        return call(...args);
      },
    });
    const engine = createEngine({
      store,
      workflows: [parent, kid],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 200,
      log: () => {},
    });
    await engine.start(parent, undefined, { id: "p" });
    await until(() => aStarted && createHeld, "step a runs, the child's create is held");
    const closing = engine.close();
    // Step a ends within the grace; s is then kept from starting (the engine drains).
    await new Promise((r) => setImmediate(r));
    aGate.open();
    await closing;
    createGate.open();
    const client = createEngine({ store: sqliteStore(path), worker: false, clock });
    cleanups.push(() => client.close());
    await until(
      async () => (await client.getRun("p"))?.status === "pending",
      "the parent handed back once its child's create answered",
      5_000,
    );
    const next = createEngine({
      store: sqliteStore(path),
      workflows: [parent, kid],
      clock,
      pollIntervalMs: 10,
    });
    cleanups.push(() => next.close());
    await expect(advanceUntil(clock, next.handle("p").result(), 1_000, 200)).resolves.toBe(3);
    expect(sBodies).toBe(1);
    expect(await lostAttempts(path, "p")).toEqual([]);
  });
});

describe("close() with closeGraceMs 0 and a sweep in flight", () => {
  // Before: a sweep of the worker table that found this worker's row gone (another worker
  // judged it dead) wrote the row again; close() did not wait for that write (its wait for
  // the sweep is bounded by the grace: 0), removed the row, and the write landed after: a
  // worker row left behind by a worker that closed cleanly (live for a lease, so starts by
  // name and the version check take its workflows as served).
  it("the row is not written again after close() removed it", async () => {
    const path = dbPath();
    const clock = createVirtualClock();
    const wf = workflow({ name: "w", version: "1" }, async () => 1);
    let hideSelf = false;
    let registers = 0;
    const registerGate = gate();
    let registerAsked = false;
    let registerLanded: Promise<unknown> = Promise.resolve();
    let id = "";
    const store = around(sqliteStore(path), {
      listWorkers: async (call) => {
        const rows = (await call()) as Array<{ id: string }>;
        return hideSelf ? rows.filter((r) => r.id !== id) : rows;
      },
      registerWorker: async (call, ...args) => {
        if (++registers === 1) return call(...args);
        registerAsked = true;
        // The write reaches the database late (a slow network): it still lands.
        registerLanded = registerGate.opened.then(() => call(...args));
        return registerLanded;
      },
      // The store stays open for that late write (as a PostgreSQL server would take it).
      close: async (call) => {
        await registerLanded.catch(() => {});
        return call();
      },
    });
    const engine = createEngine({
      store,
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
    });
    id = engine.workerId;
    await engine.listRuns();
    hideSelf = true;
    await advanceUntil(
      clock,
      until(() => registerAsked, "the sweep writing the row again"),
      1_000,
      100,
    );
    const closing = engine.close();
    setTimeout(registerGate.open, 300);
    await closing;
    await registerLanded;
    const look = sqliteStore(path);
    await look.open({ clock: realClock });
    cleanups.push(() => look.close());
    expect((await look.listWorkers()).map((w) => w.id)).toEqual([]);
  });
});

describe("close() of a worker that took over a crashed run", () => {
  // Before: a run taken from a crashed worker that close() handed back (pending) before its
  // replay reached the call the crash cut was claimed next as an ordinary run: that call's
  // lost attempt was never charged, so crash after crash (each followed by a graceful
  // restart) ran the step more often than maxAttempts allows.
  it("leaves the crash to be charged by the next claimer", async () => {
    const path = dbPath();
    const makeStore = () => sqliteStore(path);
    const { clock, wf, bodies } = await crashedRun(makeStore, cleanups, {
      retry: { maxAttempts: 1 },
    });
    // The next worker takes the run over, but closes while it still reads the journal.
    const reading = gate();
    let readAsked = false;
    const b = createEngine({
      store: around(sqliteStore(path), {
        loadJournal: async (call, ...args) => {
          readAsked = true;
          await reading.opened;
          return call(...args);
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: () => {},
    });
    await until(() => readAsked, "the takeover reading the journal");
    await b.close();
    reading.open();
    const c = createEngine({
      store: sqliteStore(path),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
    });
    cleanups.push(() => c.close());
    const outcome = await outcomeOf(c, clock);
    // maxAttempts 1, and the one attempt died with its worker.
    expect(outcome).toBe("WorkerLostError");
    expect(bodies()).toBe(1);
    expect(await lostAttempts(path, "r")).toEqual(["s"]);
  });
});

describe("close() of a worker replaying a crashed run, its workflow awaiting its own I/O", () => {
  // Before: the drained replay, nothing in flight, handed the run back (pending) before it
  // reached the call the crash cut: that call's lost attempt was never charged.
  it("leaves the crash to be charged by the next claimer", async () => {
    const path = dbPath();
    const clock = createVirtualClock();
    let bodies = 0;
    const hang = gate();
    let replays = 0;
    let ioAwaited = false;
    const io = gate();
    const wf = workflow(
      { name: "crashy-io", version: "1", retry: { maxAttempts: 1 } },
      async (ctx) => {
        await ctx.step("first", () => 1);
        if (++replays === 2) {
          ioAwaited = true;
          await io.opened;
        }
        return ctx.step("s", async () => {
          bodies++;
          if (bodies === 1) {
            crashing.crash();
            await hang.opened;
          }
          return "ran";
        });
      },
    );
    const crashing = crashableStore(sqliteStore(path));
    const a = createEngine({
      store: crashing,
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: () => {},
    });
    closeDeadEngine(a, cleanups);
    cleanups.push(hang.open);
    await a.start(wf, undefined, { id: "r" });
    await until(() => crashing.crashed, "the worker crashed in the step");
    await crashing.settled();
    await clock.advance(60_000);
    const b = createEngine({
      store: sqliteStore(path),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: () => {},
    });
    await until(() => ioAwaited, "the takeover's replay awaiting its own I/O");
    await b.close();
    io.open();
    const c = createEngine({
      store: sqliteStore(path),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
    });
    cleanups.push(() => c.close());
    const outcome = await advanceUntil(
      clock,
      c
        .handle("r")
        .result()
        .then(
          (v) => v,
          (e: Error) => e.name,
        ),
      1_000,
      200,
    );
    expect(outcome).toBe("WorkerLostError");
    expect(bodies).toBe(1);
    expect(await lostAttempts(path, "r")).toEqual(["s"]);
  });
});

describe("close() whose removal of the worker's row fails", () => {
  // Before: the worker's close() rejected with the store's error, and the engine's close()
  // stopped there: the store was never closed (on PostgreSQL its pool and LISTEN socket
  // kept the process alive), and neither was the subscription.
  it("still closes the store, and then reports the error", async () => {
    const path = dbPath();
    const plan = { failing: new Set<keyof Store>() };
    let storeClosed = false;
    const store = around(sqliteStore(path), {
      close: async (call) => {
        storeClosed = true;
        return call();
      },
    });
    const wf = workflow({ name: "w", version: "1" }, async () => 1);
    const e = createEngine({ store: faultyStore(store, plan), workflows: [wf], log: () => {} });
    expect(await (await e.start(wf, undefined)).result()).toBe(1);
    plan.failing.add("removeWorker");
    await expect(e.close()).rejects.toThrow(/removeWorker fails/);
    expect(storeClosed).toBe(true);
  });
});

describe("close() of a worker that took over a crashed run and failed an attempt of its own", () => {
  // The crash found the step in its backoff (nothing charged: nothing was in flight); this
  // worker ran the next attempt, which failed, and closed during the backoff after it.
  // Handed back as the crash left the run (its lease ended, still "running"), the next
  // claimer, its replay past that backoff, charged a lost attempt that never began.
  it("hands the run back to pending: no lost attempt is charged", async () => {
    const path = dbPath();
    const clock = createVirtualClock();
    let bodies = 0;
    const wf = workflow(
      {
        name: "flaky-in-backoff",
        version: "1",
        retry: { maxAttempts: 5, initialDelay: "2m", maxDelay: "2m", factor: 1, jitter: false },
      },
      async (ctx) =>
        ctx.step("s", async () => {
          bodies++;
          if (bodies <= 2) throw new Error(`flaky ${bodies}`);
          return "ran";
        }),
    );
    const attempts = async () => {
      const look = sqliteStore(path);
      await look.open({ clock: realClock });
      try {
        return (await look.loadJournal("r")).attempts.length;
      } finally {
        await look.close();
      }
    };
    const options = { workflows: [wf], clock, pollIntervalMs: 10, inProcessRetryMs: 600_000 };
    const crashing = crashableStore(sqliteStore(path));
    // The crashed worker's own time stands still: like a dead process, it runs no more
    // attempts (its backoff never ends); the store's lease times are the shared clock's.
    const a = createEngine({
      ...options,
      clock: createVirtualClock(),
      store: crashing,
      closeGraceMs: 0,
      log: () => {},
    });
    closeDeadEngine(a, cleanups);
    await a.start(wf, undefined, { id: "r" });
    await until(async () => (await attempts()) === 1, "the first attempt failed and recorded");
    crashing.crash(); // in the first backoff
    await crashing.settled();
    await clock.advance(60_000); // past the lease, not past the backoff (2 minutes)
    const b = createEngine({ ...options, store: sqliteStore(path), closeGraceMs: 0 });
    await advanceUntil(
      clock,
      until(async () => (await attempts()) === 2, "the takeover's own attempt failed"),
      200,
      3_000,
    );
    await b.close(); // in the second backoff
    await clock.advance(10 * 60_000); // the next claimer replays past that backoff
    const c = createEngine({ ...options, store: sqliteStore(path) });
    cleanups.push(() => c.close());
    const out = await advanceUntil(clock, c.handle("r").result(), 1_000, 200);
    expect(out).toBe("ran");
    expect(bodies).toBe(3);
    expect(await lostAttempts(path, "r")).toEqual([]);
  });
});

describe("close(): a late hand-back that never answers", () => {
  // Before: the store closed only once every claim still unanswered at close()'s bound had
  // answered and handed its runs back. On a store that never answers (a silent network:
  // pg has no client-side timeout) that was never, and its pool and LISTEN socket kept the
  // process alive while close() had long resolved. Now the store closes at the latest one
  // lease after close(): a run whose hand-back never lands is taken over once its lease ends.
  it("the store still closes, within a lease, and says so", async () => {
    const path = dbPath();
    const once = workflow({ name: "once-hung", version: "1" }, async () => 1);
    let hold = false;
    let claimHeld = false;
    let closed = false;
    const store = around(sqliteStore(path), {
      claimRuns: async (call, ...args) => {
        const claimed = (await call(...args)) as unknown[];
        if (hold && claimed.length > 0) {
          claimHeld = true;
          await new Promise(() => {}); // never answers
        }
        return claimed;
      },
      close: async (call) => {
        closed = true;
        return call();
      },
    });
    const logged: string[] = [];
    const engine = createEngine({
      store,
      workflows: [once],
      pollIntervalMs: 10,
      closeGraceMs: 0,
      leaseMs: 300,
      log: (m) => logged.push(m),
    });
    await engine.listRuns();
    const client = createEngine({ store: sqliteStore(path), worker: false });
    cleanups.push(() => client.close());
    hold = true;
    await client.start("once-hung@1", null, { id: "hung" });
    await until(() => claimHeld, "the claim committed, its answer held for ever");
    await engine.close();
    await until(() => closed, "the store closed though the hand-back never answered", 5_000);
    expect(logged.some((m) => m.includes("closing the store under it"))).toBe(true);
  });
});
