// Findings of a second review of the worker's lifecycle (close() and the work that answers
// after it, hand-backs, the charge of a crash). Each test failed on the code it was written
// against, and stays as the regression test of its mend.

import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { encode } from "../src/codec/codec.js";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { ROOT, startCairn } from "./helpers/cli.js";
import { freshStorage, pgUrl } from "./helpers/engines.js";
import { chargesACrash, cleanupsAfterEach, crashedRun, outcomeOf } from "./helpers/lifecycle.js";
import { tempDir, until } from "./helpers/sqlite.js";
import { around, gate, lostAttempts } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();

/** A run "r" of workflow "crashy" whose worker crashed in its step "s" (`maxAttempts`, a
 *  short backoff), on a fresh SQLite store; the clock is past its lease. */
async function crashedOnSqlite(maxAttempts = 1) {
  const makeStore = freshStorage("sqlite", cleanups);
  const retry = { maxAttempts, initialDelay: "10ms" } as const;
  return { makeStore, ...(await crashedRun(makeStore, cleanups, { retry })) };
}

describe("hand-backs of a run taken over from a crashed worker", () => {
  // Before: the takeover's store error handed the run back to pending, and it was claimed
  // next as an ordinary run: the crash was charged nothing, the body ran twice and the run
  // completed.
  it("a store error reading its journal keeps the crash's charge (maxAttempts 1 fails with WorkerLostError)", async () => {
    const { makeStore, clock, wf, bodies } = await crashedOnSqlite();
    let failed = false;
    const b = createEngine({
      store: around(makeStore(), {
        loadJournal: async (call, ...args) => {
          if (!failed) {
            failed = true;
            throw new Error("connection reset (injected)");
          }
          return call(...args);
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => b.close());
    const outcome = await outcomeOf(b, clock);
    expect({ outcome, bodies: bodies(), lost: await lostAttempts(makeStore, "r") }).toEqual({
      outcome: "WorkerLostError",
      bodies: 1,
      lost: ["s"],
    });
  });

  // Before: the hand-back failing too, the run became an orphan of the worker, handed back
  // to pending once its lease expired: the crash was charged nothing.
  it("an orphan handed back once its lease expired keeps the crash's charge", async () => {
    const { makeStore, clock, wf, bodies } = await crashedOnSqlite();
    let loadFailed = false;
    let handBackFailed = false;
    const failHandBackOnce = async (
      call: (...a: unknown[]) => Promise<unknown>,
      ...args: unknown[]
    ) => {
      if (loadFailed && !handBackFailed) {
        handBackFailed = true;
        throw new Error("connection reset (injected)");
      }
      return call(...args);
    };
    const b = createEngine({
      store: around(makeStore(), {
        loadJournal: async (call, ...args) => {
          if (!loadFailed) {
            loadFailed = true;
            throw new Error("connection reset (injected)");
          }
          return call(...args);
        },
        releaseRun: failHandBackOnce,
        expireLease: failHandBackOnce,
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => b.close());
    const outcome = await outcomeOf(b, clock);
    expect({
      outcome,
      handBackFailed,
      bodies: bodies(),
      lost: await lostAttempts(makeStore, "r"),
    }).toEqual({
      outcome: "WorkerLostError",
      handBackFailed: true,
      bodies: 1,
      lost: ["s"],
    });
  });

  // Before: a claim that took over a crashed run and answered after close() left the run
  // leased to the gone worker (whose row close() had already removed) until its lease
  // ended: nothing could resume it for a whole lease.
  it("a claim of a crashed run answered after close() ends its lease at once, keeping the crash's charge", async () => {
    const { makeStore, clock, wf, bodies } = await crashedOnSqlite();
    let claimHeld = false;
    const answer = gate();
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
    cleanups.push(answer.open);
    await until(() => claimHeld, "the takeover's claim committed, its answer held");
    await b.close();
    answer.open();
    const look = createEngine({ store: makeStore(), worker: false, clock });
    cleanups.push(() => look.close());
    // Without moving the clock: the lease ended when the late claim answered.
    await until(async () => {
      const run = await look.getRun("r");
      return run?.status === "running" && run.leaseOwner === undefined;
    }, "the late claim's run with its lease ended");
    const c = createEngine({
      store: makeStore(),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
    });
    cleanups.push(() => c.close());
    const outcome = await outcomeOf(c, clock);
    expect({ outcome, bodies: bodies(), lost: await lostAttempts(makeStore, "r") }).toEqual({
      outcome: "WorkerLostError",
      bodies: 1,
      lost: ["s"],
    });
  });

  // Before: the replay counted the crash as charged once it asked for the lost attempt's
  // record, before it was written: the write failing, the run went back to pending and
  // its next claimer charged nothing.
  it("a store error writing the crash's charge keeps it for the next claimer", async () => {
    const { makeStore, clock, wf, bodies } = await crashedOnSqlite();
    let chargeFailed = false;
    const b = createEngine({
      store: around(makeStore(), {
        appendRecords: async (call, ...args) => {
          const charges = chargesACrash(args[0]);
          if (charges && !chargeFailed) {
            chargeFailed = true;
            throw new Error("connection reset (injected)");
          }
          return call(...args);
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => b.close());
    const outcome = await outcomeOf(b, clock);
    expect({
      outcome,
      chargeFailed,
      bodies: bodies(),
      lost: await lostAttempts(makeStore, "r"),
    }).toEqual({
      outcome: "WorkerLostError",
      chargeFailed: true,
      bodies: 1,
      lost: ["s"],
    });
  });

  // Before: the charge's write landed but its answer was lost (a COMMIT whose answer never
  // came, retries failing): the replay took the crash as still to charge, handed the run
  // back as the crash left it, and its next claimer charged the same crash again (with
  // maxAttempts 2 the run failed with its step run once). The hand-back now asks the
  // journal whether the charge landed.
  it("a charge that lands though its answer is lost is charged once", async () => {
    const { makeStore, clock, wf, bodies } = await crashedOnSqlite(2);
    let chargeFailed = false;
    const b = createEngine({
      store: around(makeStore(), {
        appendRecords: async (call, ...args) => {
          const charges = chargesACrash(args[0]);
          const written = await call(...args);
          if (charges && !chargeFailed) {
            chargeFailed = true;
            throw new Error("connection reset after the commit (injected)");
          }
          return written;
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => b.close());
    const outcome = await outcomeOf(b, clock);
    expect({
      outcome,
      chargeFailed,
      bodies: bodies(),
      lost: await lostAttempts(makeStore, "r"),
    }).toEqual({ outcome: "ran", chargeFailed: true, bodies: 2, lost: ["s"] });
  });
});

describe("cairn worker stopped with work close() left running", () => {
  const processes: Array<ReturnType<typeof startCairn>> = [];
  afterEach(() => {
    for (const w of processes.splice(0)) {
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL");
    }
  });

  // Before: the CLI called process.exit right after engine.close(): a claim that answered
  // after close()'s bound was cut before it handed its run back, which stayed leased to the
  // gone worker until its lease ended.
  it("SIGTERM with a claim unanswered past close()'s bound: the worker waits for it and hands its run back", async () => {
    const t = tempDir("cairn-h8-late-claim-");
    cleanups.push(t.cleanup);
    const db = join(t.dir, "cairn.db");
    const module = join(t.dir, "workflows.mjs");
    writeFileSync(
      module,
      `import { workflow } from ${JSON.stringify(pathToFileURL(join(ROOT, "src/index.ts")).href)};
export const w = workflow({ name: "w", version: "1" }, async (ctx) => ctx.step("s", () => 1));
`,
    );
    // Holds the answer of a claim that took a run until the test says go (a store that
    // answers late), in the worker's own process.
    const hold = join(t.dir, "hold-claims.mjs");
    writeFileSync(
      hold,
      `import { existsSync, writeFileSync } from "node:fs";
import { sqliteStore } from ${JSON.stringify(pathToFileURL(join(ROOT, "src/store/sqlite/sqlite-store.ts")).href)};
const dir = ${JSON.stringify(t.dir)};
const proto = Object.getPrototypeOf(sqliteStore(dir + "/unused.db"));
const claimRuns = proto.claimRuns;
proto.claimRuns = async function (p) {
  const claimed = await claimRuns.call(this, p);
  if (claimed.length > 0) {
    writeFileSync(dir + "/claim-held", "");
    while (!existsSync(dir + "/go")) await new Promise((r) => setTimeout(r, 5));
  }
  return claimed;
};
`,
    );
    const worker = startCairn(["worker", module, "--store", db, "--import", hold]);
    processes.push(worker);
    await until(
      () => worker.output.stdout.includes("Running;") || worker.child.exitCode !== null,
      "worker start",
    );
    const client = createEngine({ store: sqliteStore(db), worker: false });
    cleanups.push(() => client.close());
    await client.start("w@1", undefined, { id: "r1" });
    await until(
      () => existsSync(join(t.dir, "claim-held")),
      "the claim committed, its answer held",
    );
    worker.child.kill("SIGTERM");
    await until(
      () => worker.output.stdout.includes("still under way") || worker.child.exitCode !== null,
      "close() returned",
    );
    writeFileSync(join(t.dir, "go"), "");
    const res = await worker.done;
    expect(res.code, res.stderr).toBe(0);
    const run = await client.getRun("r1");
    expect({ status: run?.status, leaseOwner: run?.leaseOwner }).toEqual({
      status: "pending",
      leaseOwner: undefined,
    });
    expect(res.stdout).toMatch(/Worker stopped\.$/m);
  });
});

describe("close(): a late claim of a run canceled meanwhile", () => {
  // Before: the hand-back (canceled: a cancel came while the claim's answer was on its way)
  // started the cancel of the run's children without waiting for it, and the store closed
  // under that cascade: the child stayed pending, working for a canceled parent.
  it("cancels the run's children before the store closes", async () => {
    const makeStore = freshStorage("sqlite", cleanups);
    const clock = createVirtualClock();
    const parent = workflow({ name: "p", version: "1" }, async (ctx) => ctx.step("s", () => 1));
    const client = createEngine({ store: makeStore(), worker: false, clock });
    cleanups.push(() => client.close());
    const raw = makeStore();
    await raw.open({ clock });
    cleanups.push(() => raw.close());
    let hold = false;
    let claimHeld = false;
    let storeClosed = false;
    const answer = gate();
    const store = around(makeStore(), {
      claimRuns: async (call, ...args) => {
        const claimed = (await call(...args)) as unknown[];
        if (hold && claimed.length > 0) {
          claimHeld = true;
          await answer.opened;
        }
        return claimed;
      },
      // The cascade's look for children answers a turn of the event loop later (a store on
      // a network): the store must not close meanwhile.
      listRuns: async (call, ...args) => {
        if ((args[0] as { parentId?: string } | undefined)?.parentId === "p") {
          await new Promise((r) => setImmediate(r));
        }
        return call(...args);
      },
      close: async (call, ...args) => {
        storeClosed = true;
        return call(...args);
      },
    });
    const b = createEngine({
      store,
      workflows: [parent],
      clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: () => {},
    });
    cleanups.push(answer.open);
    await b.listRuns();
    hold = true;
    await client.start("p@1", undefined, { id: "p" });
    await raw.createRun({
      id: "p/c",
      workflow: "other",
      version: "1",
      input: encode(null),
      budgetLimit: {},
      parentId: "p",
    });
    await until(() => claimHeld, "the claim committed, its answer held");
    // Asked of the store alone: the run is running, so only its cancel is requested.
    await raw.requestCancel("p", "stop");
    await b.close();
    answer.open();
    await until(() => storeClosed, "the engine's store closed after the late hand-back");
    expect({
      parent: (await client.getRun("p"))?.status,
      child: (await client.getRun("p/c"))?.status,
    }).toEqual({ parent: "canceled", child: "canceled" });
  });
});

describe.skipIf(!pgUrl)("PostgreSQL: two engines, one taking over a crashed run", () => {
  // The run whose takeover met a store error goes back with its lease ended: either engine
  // may take it next, and whichever does charges the crash; the one that failed then closes.
  it("the crash is charged once, by whichever engine takes the run next", async () => {
    const makeStore = freshStorage("postgres", cleanups);
    const { clock, wf, bodies } = await crashedRun(makeStore, cleanups, {
      retry: { maxAttempts: 1, initialDelay: "10ms" },
    });
    let failed = false;
    const b = createEngine({
      store: around(makeStore(), {
        loadJournal: async (call, ...args) => {
          if (!failed) {
            failed = true;
            throw new Error("connection reset (injected)");
          }
          return call(...args);
        },
      }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    cleanups.push(() => b.close());
    await until(() => failed, "the takeover's journal read failed");
    const c = createEngine({ store: makeStore(), workflows: [wf], clock, pollIntervalMs: 10 });
    cleanups.push(() => c.close());
    await b.close();
    const outcome = await outcomeOf(c, clock);
    expect({ outcome, bodies: bodies(), lost: await lostAttempts(makeStore, "r") }).toEqual({
      outcome: "WorkerLostError",
      bodies: 1,
      lost: ["s"],
    });
  });
});
