// Found by a review of the epoch floor and the fork changes of stop 24, each a regression
// test of a bug it found: on PostgreSQL a run created while retention deleted its id started
// below the deleted run's epoch; a fork of a resumed run failed when the history the resume
// replaced had recorded a step or drawn a value after the failure.
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { NewRun, Store } from "../src/store/store.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
});

function newRun(id: string, over: Partial<NewRun> = {}): NewRun {
  return { id, workflow: "wf", version: "1", input: "null", ...over } as NewRun;
}

async function startedAndFinished(store: Store, id: string, claims: number): Promise<number> {
  // A run claimed `claims` times (epoch = claims), then completed.
  const { run } = await store.createRun(
    newRun(id, { claimBy: { workerId: "w1", leaseMs: 60_000 } }),
  );
  let epoch = run.epoch;
  for (let i = 1; i < claims; i++) {
    await store.releaseRun({ runId: id, epoch, status: "pending", readyAt: 0 });
    const [c] = await store.claimRuns({
      workerId: "w1",
      leaseMs: 60_000,
      limit: 1,
      workflows: ["wf@1"],
    });
    epoch = c!.run.epoch;
  }
  const done = await store.releaseRun({
    runId: id,
    epoch,
    status: "completed",
    output: "1",
    readyAt: null,
  });
  if (!done.ok) throw new Error("release failed");
  return epoch;
}

describe.skipIf(!pgUrl)("postgres: epoch floor against a concurrent createRun", () => {
  it("a run created under an id while retention deletes it starts above the deleted run's epoch", async () => {
    const { schema, drop } = testSchema(pgUrl!, "cairn_floor");
    cleanups.push(drop);
    const store = postgresStore(pgUrl!, { schema });
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    const deletedEpoch = await startedAndFinished(store, "order-1", 3);
    expect(deletedEpoch).toBe(3);

    // Another session holds the floor row for a moment, so deleteRun's transaction is
    // caught between deleting the run's row and committing (only the timing is steered).
    const holder = new pg.Client({ connectionString: pgUrl! });
    await holder.connect();
    cleanups.push(() => holder.end());
    const monitor = new pg.Client({ connectionString: pgUrl! });
    await monitor.connect();
    cleanups.push(() => monitor.end());
    await holder.query("BEGIN");
    await holder.query(`SELECT * FROM "${schema}".epoch_floor FOR UPDATE`);
    const deleting = store.deleteRun("order-1");
    // Let deleteRun reach the floor.
    await waitForLockWait(monitor, 1, schema);
    // The same id is started again meanwhile (a client starting "order-1" by id).
    const other = postgresStore(pgUrl!, { schema });
    await other.open({ clock: realClock });
    cleanups.push(() => other.close());
    const creating = other.createRun(
      newRun("order-1", { claimBy: { workerId: "w-new", leaseMs: 60_000 } }),
    );
    await waitForLockWait(monitor, 2, schema);
    await holder.query("COMMIT");
    expect(await deleting).toMatchObject({ deleted: true });
    const { run: again, created } = await creating;
    expect(created).toBe(true);
    // A write fenced with an epoch of the deleted run must not match the new run's.
    expect(again.epoch).toBeGreaterThan(deletedEpoch);
  }, 30_000);
});

/** Waits until `n` sessions wait for a lock. */
async function waitForLockWait(c: pg.Client, n: number, schema: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const r = await c.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
      [`%${schema}%`],
    );
    if (r.rows[0].n >= n) return;
    await new Promise((res) => setTimeout(res, 25));
  }
  throw new Error(`fewer than ${n} sessions wait for a lock`);
}

describe("fork of a resumed run: a value drawn in the replaced history", () => {
  it("the fork from a later step completes like its source (a ctx.uuid() drawn in an error handler before the resume)", async () => {
    const { sqliteStore, createEngine, workflow, FatalError } = await import("../src/index.js");
    const { tempDbPath } = await import("./helpers/sqlite.js");
    const db = tempDbPath();
    cleanups.push(async () => db.cleanup());
    let broken = true;
    const wf = workflow({ name: "drawn-in-handler", version: "1" }, async (ctx) => {
      await ctx.step("a", () => "a");
      try {
        await ctx.step("x", () => {
          if (broken) throw new FatalError("x is broken");
          return "x";
        });
      } catch (e) {
        ctx.uuid(); // e.g. an incident id, drawn while handling the failure
        throw e;
      }
      return ctx.step("c", () => "c");
    });
    const e = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf],
      pollIntervalMs: 10,
      replayStallMs: 2_000,
    });
    cleanups.push(() => e.close());
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow("x is broken");
    broken = false;
    await e.resume(run.id);
    expect(await run.result()).toBe("c");
    const fork = await e.fork(run.id, { fromStep: "c" });
    const outcome = await fork.result().then(
      (v) => ({ ok: v }),
      (err: Error) => ({ err: err.message.slice(0, 300) }),
    );
    expect(outcome).toEqual({ ok: "c" });
  }, 20_000);
});

describe("fork of a resumed run: a step recorded in the replaced history", () => {
  it("the fork from a later step completes like its source (a step recorded in an error handler before the resume)", async () => {
    const { sqliteStore, createEngine, workflow, FatalError } = await import("../src/index.js");
    const { tempDbPath } = await import("./helpers/sqlite.js");
    const db = tempDbPath();
    cleanups.push(async () => db.cleanup());
    let broken = true;
    const wf = workflow({ name: "step-in-handler", version: "1" }, async (ctx) => {
      await ctx.step("a", () => "a");
      try {
        await ctx.step("x", () => {
          if (broken) throw new FatalError("x is broken");
          return "x";
        });
      } catch (e) {
        await ctx.step("log", () => "logged"); // e.g. an incident logged while handling it
        throw e;
      }
      return ctx.step("c", () => "c");
    });
    const e = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf],
      pollIntervalMs: 10,
      replayStallMs: 2_000,
    });
    cleanups.push(() => e.close());
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow("x is broken");
    broken = false;
    await e.resume(run.id);
    expect(await run.result()).toBe("c");
    const fork = await e.fork(run.id, { fromStep: "c" });
    const outcome = await fork.result().then(
      (v) => ({ ok: v }),
      (err: Error) => ({ err: err.message.slice(0, 300) }),
    );
    expect(outcome).toEqual({ ok: "c" });
  }, 20_000);
});
