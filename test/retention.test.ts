// Retention (engine.gc, `cairn gc`, the engine's retention option): deletes finished runs
// older than the cutoff with every record and the workspace objects only they held, in
// batches, while a worker keeps executing other runs; never an unfinished run, a recent one
// or an object another run still holds. CAIRN_SOAK=1 collects 100,000 finished runs. A
// collected run leaves no row in any table keyed by run id (attempts, intents and approvals
// included); the runs gc keeps keep every row.

import { join } from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { type AnyWorkflow, createEngine, type Store, workflow } from "../src/index.js";
import type { RunRecord, StepRecord } from "../src/store/store.js";
import type { WorkspaceObject } from "../src/store/workspace-records.js";
import { createVirtualClock } from "../src/testing/index.js";
import { cairn } from "./helpers/cli.js";
import { BACKENDS, pgUrl, useHarness } from "./helpers/engines.js";
import { tempDir } from "./helpers/sqlite.js";

const DAY = 86_400_000;
const SOAK = process.env.CAIRN_SOAK === "1";
const FINISHED = SOAK ? Number(process.env.CAIRN_SOAK_RUNS ?? 100_000) : 600;

function object(text: string): WorkspaceObject {
  const data = new TextEncoder().encode(text);
  return {
    hash: Buffer.from(text).toString("hex").padEnd(16, "0"),
    kind: "blob",
    size: data.length,
    data,
  };
}

function step(runId: string, at: number): StepRecord {
  return {
    runId,
    key: "s",
    generation: 0,
    seq: 0,
    name: "s",
    kind: "step",
    outcome: "ok",
    delivery: 0,
    issuedAfter: 0,
    issuedLate: false,
    result: '["r"]',
    error: null,
    spend: {},
    attempt: 1,
    startedAt: at,
    completedAt: at,
  };
}

/** Seeds `n` finished runs (each with a step, an event, a stream chunk), 40 days ago. */
async function seedOld(store: Store, n: number, prefix: string): Promise<void> {
  const wfv = "old@1";
  for (let i = 0; i < n; i += 200) {
    const ids = Array.from({ length: Math.min(200, n - i) }, (_, j) => `${prefix}${i + j}`);
    for (const id of ids) {
      await store.createRun({ id, workflow: "old", version: "1", input: "[1]", budgetLimit: {} });
      await store.sendEvent({ runId: id, name: "e", payload: '["p"]' });
    }
    const claimed = await store.claimRuns({
      workerId: "seeder",
      workflows: [wfv],
      limit: ids.length,
      leaseMs: 60_000,
    });
    const now = await store.now();
    await store.appendRecords(
      claimed.map((c) => ({ runId: c.run.id, epoch: c.run.epoch, steps: [step(c.run.id, now)] })),
    );
    for (const [k, c] of claimed.entries()) {
      await store.appendStream({ runId: c.run.id, chunks: ["model text"] });
      const status = (["completed", "failed", "canceled"] as const)[k % 3]!;
      await store.releaseRun({
        runId: c.run.id,
        epoch: c.run.epoch,
        status,
        readyAt: null,
        ...(status === "completed" ? { output: "[1]" } : {}),
        ...(status === "failed" ? { error: { name: "Error", message: "x" } } : {}),
      });
    }
  }
}

/** Copies the runs `${prefix}0..199` (seeded through the store) with every row they own
 *  until there are `n`: a soak needs 100,000 finished runs, which the store's verbs would
 *  take far longer to write than the collection they are for. */
async function cloneOld(store: Store, backend: string, prefix: string, n: number): Promise<void> {
  const tables = ["steps", "events", "run_streams"];
  if (backend === "sqlite") {
    const db = new Database(store.description);
    const cols = (t: string) =>
      (db.prepare(`PRAGMA table_info(${t})`).all() as Array<{ name: string; pk: number }>)
        .filter((c) => !(t === "events" && c.name === "seq"))
        .map((c) => c.name);
    const copy = db.transaction((start: number) => {
      const end = Math.min(n, start + 200);
      for (const t of ["runs", ...tables]) {
        const key = t === "runs" ? "id" : "run_id";
        const c = cols(t);
        const select = c
          .map((x) => (x === key ? `'${prefix}' || (g.i) AS ${x}` : `src.${x}`))
          .join(", ");
        db.prepare(
          `WITH RECURSIVE g(i) AS (SELECT CAST(? AS INTEGER) UNION ALL SELECT i + 1 FROM g WHERE i + 1 < ?)
           INSERT INTO ${t} (${c.join(", ")})
           SELECT ${select} FROM g JOIN ${t} src ON src.${key} = '${prefix}' || (g.i % 200)`,
        ).run(start, end);
      }
    });
    for (let start = 200; start < n; start += 200) copy(start);
    db.close();
    return;
  }
  const schema = /schema "([^"]+)"$/.exec(store.description)?.[1];
  const client = new pg.Client({ connectionString: pgUrl });
  await client.connect();
  try {
    for (const t of ["runs", ...tables]) {
      const key = t === "runs" ? "id" : "run_id";
      const c = (
        await client.query<{ name: string }>(
          `SELECT column_name AS name FROM information_schema.columns
            WHERE table_schema = $1 AND table_name = $2 AND is_identity = 'NO'
            ORDER BY ordinal_position`,
          [schema, t],
        )
      ).rows.map((r) => r.name);
      const select = c.map((x) => (x === key ? `$1 || g.i AS ${x}` : `src.${x}`)).join(", ");
      if (t === "run_streams") {
        await client.query(
          `INSERT INTO "${schema}".run_stream_heads (run_id, next_offset)
           SELECT $1 || g.i, src.next_offset FROM generate_series(200, $2 - 1) AS g(i)
             JOIN "${schema}".run_stream_heads src ON src.run_id = $1 || (g.i % 200)`,
          [prefix, n],
        );
      }
      await client.query(
        `INSERT INTO "${schema}".${t} (${c.join(", ")})
         SELECT ${select} FROM generate_series(200, $2 - 1) AS g(i)
           JOIN "${schema}".${t} src ON src.${key} = $1 || (g.i % 200)`,
        [prefix, n],
      );
    }
  } finally {
    await client.end();
  }
}

/** Gives a claimed run one record of every kind a run owns: a step, a failed attempt, an
 *  effect's intent, an event, a stream chunk, and an approval requested and answered (the
 *  answer stores its event too). Through the store's verbs, as the engine writes them. */
async function seedEveryRecord(store: Store, run: RunRecord, at: number): Promise<void> {
  const [written] = await store.appendRecords([
    {
      runId: run.id,
      epoch: run.epoch,
      steps: [step(run.id, at)],
      attempts: [
        {
          runId: run.id,
          key: "flaky",
          attempt: 1,
          generation: 0,
          startedAt: at,
          endedAt: at + 1,
          error: { name: "Error", message: "boom" },
          spend: {},
          retryAt: at + 1000,
        },
      ],
      intents: [
        { runId: run.id, key: "pay", kind: "effect", name: "pay", data: "{}", createdAt: at },
      ],
    },
  ]);
  expect(written).toEqual({ ok: true });
  await store.sendEvent({ runId: run.id, name: "e", payload: '["p"]' });
  await store.appendStream({ runId: run.id, chunks: ["model text"] });
  const asked = await store.requestApproval({
    runId: run.id,
    epoch: run.epoch,
    key: "ship",
    name: "ship",
    request: '["ship it?"]',
    requestedAt: at,
    deadline: null,
    onTimeout: "reject",
  });
  expect(asked).toMatchObject({ ok: true, created: true });
  const answered = await store.answerApproval({
    runId: run.id,
    key: "ship",
    decision: "approved",
    answeredBy: "alice",
    comment: null,
    answer: null,
    via: "api",
    tokenId: null,
    event: { name: "cairn.approval:ship", payload: '["yes"]' },
  });
  expect(answered).toMatchObject({ ok: true });
}

/** Rows per table per run, counted with SQL in every table that has a run_id column (found
 *  in the schema, so a table added later is counted too): what "every record" means. */
async function rowsByRun(
  store: Store,
  backend: string,
  ids: string[],
): Promise<Record<string, Record<string, number>>> {
  const counts: Record<string, Record<string, number>> = Object.fromEntries(
    ids.map((id) => [id, {}]),
  );
  const add = (table: string, rows: Array<{ run_id: string; n: number | string }>) => {
    for (const id of ids) counts[id]![table] = 0;
    for (const r of rows) counts[r.run_id]![table] = Number(r.n);
  };
  if (backend === "sqlite") {
    const db = new Database(store.description, { readonly: true });
    try {
      const tables = (
        db
          .prepare(
            `SELECT m.name FROM sqlite_master m WHERE m.type = 'table'
               AND EXISTS (SELECT 1 FROM pragma_table_info(m.name) c WHERE c.name = 'run_id')`,
          )
          .all() as Array<{ name: string }>
      ).map((t) => t.name);
      for (const t of tables) {
        add(
          t,
          db
            .prepare(
              `SELECT run_id, count(*) AS n FROM ${t}
                WHERE run_id IN (SELECT value FROM json_each(?)) GROUP BY run_id`,
            )
            .all(JSON.stringify(ids)) as Array<{ run_id: string; n: number }>,
        );
      }
    } finally {
      db.close();
    }
    return counts;
  }
  const schema = /schema "([^"]+)"$/.exec(store.description)?.[1];
  const client = new pg.Client({ connectionString: pgUrl });
  await client.connect();
  try {
    const tables = (
      await client.query<{ name: string }>(
        `SELECT table_name AS name FROM information_schema.columns
          WHERE table_schema = $1 AND column_name = 'run_id'`,
        [schema],
      )
    ).rows.map((r) => r.name);
    for (const t of tables) {
      const res = await client.query<{ run_id: string; n: string }>(
        `SELECT run_id, count(*) AS n FROM "${schema}".${t}
          WHERE run_id = ANY($1::text[]) GROUP BY run_id`,
        [ids],
      );
      add(t, res.rows);
    }
  } finally {
    await client.end();
  }
  return counts;
}

describe.each(BACKENDS)("retention (%s)", (backend) => {
  const harness = useHarness(backend);

  it(`collects ${FINISHED} old finished runs in batches while a worker executes other runs; nothing else is touched`, {
    timeout: SOAK ? 1_800_000 : 120_000,
  }, async () => {
    const h = harness();
    // The past, on the store's own clock: a virtual clock 40 days back.
    await h.clock.set(Date.now() - 40 * DAY);
    const past = h.store();
    await past.open({ clock: h.clock });
    // 200 through the store's verbs, the rest copied (a store call per row took a minute on
    // PostgreSQL on a loaded machine, half the test's time limit).
    await seedOld(past, 200, "old_");
    await cloneOld(past, backend, "old_", FINISHED);
    // Old but unfinished: a waiting run and a paused one, sharing an object with an old
    // finished run; another old finished run holds an object alone.
    await past.createRun({
      id: "old-waiting",
      workflow: "old",
      version: "1",
      input: "[1]",
      budgetLimit: {},
    });
    await past.createRun({
      id: "old-paused",
      workflow: "old",
      version: "1",
      input: "[1]",
      budgetLimit: {},
    });
    await past.createRun({
      id: "old-holder",
      workflow: "old",
      version: "1",
      input: "[1]",
      budgetLimit: {},
    });
    const claims = await past.claimRuns({
      workerId: "seeder",
      workflows: ["old@1"],
      limit: 10,
      leaseMs: 60_000,
    });
    const byId = new Map(claims.map((c) => [c.run.id, c.run]));
    const shared = object("shared by a finished and a waiting run");
    const alone = object("held by one finished run alone");
    const waiting = byId.get("old-waiting")!;
    const holder = byId.get("old-holder")!;
    const pausedRun = byId.get("old-paused")!;
    await past.putWorkspaceObjects({
      runId: holder.id,
      epoch: holder.epoch,
      objects: [shared, alone],
      refs: [],
    });
    await past.putWorkspaceObjects({
      runId: waiting.id,
      epoch: waiting.epoch,
      objects: [],
      refs: [shared.hash],
    });
    await past.appendRecords([
      { runId: waiting.id, epoch: waiting.epoch, steps: [step(waiting.id, h.clock.now())] },
    ]);
    await past.releaseRun({
      runId: waiting.id,
      epoch: waiting.epoch,
      status: "waiting",
      readyAt: null,
      waitingFor: ["never"],
    });
    await past.releaseRun({
      runId: pausedRun.id,
      epoch: pausedRun.epoch,
      status: "paused",
      readyAt: null,
      reason: "budget",
    });
    await past.releaseRun({
      runId: holder.id,
      epoch: holder.epoch,
      status: "completed",
      readyAt: null,
      output: "[1]",
    });
    await past.close();

    // Now: a recent finished run, and a worker executing live runs while gc deletes.
    const clock = createVirtualClock(Date.now());
    const live = workflow({ name: "live", version: "1" }, async (ctx, n: number) => {
      const a = await ctx.step("a", () => n + 1);
      return ctx.step("b", () => a * 2);
    });
    const engine = createEngine({
      store: h.store(),
      workflows: [live] as AnyWorkflow[],
      clock,
      pollIntervalMs: 5,
    });
    const recent = await engine.start(live, 0, { id: "recent" });
    expect(await recent.result()).toBe(2);

    const batches: number[] = [];
    const liveRuns = await Promise.all(Array.from({ length: 40 }, (_, i) => engine.start(live, i)));
    const started = Date.now();
    const [res, outputs] = await Promise.all([
      engine.gc({ olderThan: "30d", batchSize: 100, onBatch: (p) => batches.push(p.runs) }),
      Promise.all(liveRuns.map((r) => r.result())),
    ]);
    const seconds = (Date.now() - started) / 1000;
    if (SOAK) console.log(`gc (${backend}): ${res.runs} finished runs in ${seconds.toFixed(1)} s`);
    expect(outputs).toEqual(Array.from({ length: 40 }, (_, i) => (i + 1) * 2));
    expect(res.runs).toBe(FINISHED + 1);
    expect(res.objects).toBe(1);
    expect(batches.length).toBeGreaterThan(1);
    expect(batches.at(-1)).toBe(FINISHED + 1);

    const store = h.store();
    await store.open({ clock });
    expect(await store.getRun("old_0")).toBeUndefined();
    expect(await store.getRun(`old_${FINISHED - 1}`)).toBeUndefined();
    expect(await store.getRun("old-holder")).toBeUndefined();
    expect(await store.listEvents("old_1")).toEqual([]);
    expect(await store.readStream({ runId: "old_1", from: 0 })).toEqual([]);
    expect((await store.getRun("old-waiting"))?.status).toBe("waiting");
    expect((await store.loadJournal("old-waiting")).steps).toHaveLength(1);
    expect((await store.getRun("old-paused"))?.status).toBe("paused");
    expect((await store.getRun("recent"))?.status).toBe("completed");
    expect(await store.missingWorkspaceObjects([shared.hash, alone.hash])).toEqual([alone.hash]);
    expect((await store.getWorkspaceObjects([shared.hash]))[0]?.data).toEqual(shared.data);
    expect(await store.listRuns({ finishedBefore: clock.now() - 30 * DAY })).toEqual([]);
    await store.close();
    await engine.close();

    // Idempotency of start by id ends with retention: the deleted id starts anew.
    const again = createEngine({
      store: h.store(),
      workflows: [live] as AnyWorkflow[],
      clock,
      pollIntervalMs: 5,
    });
    const fresh = await again.start(live, 5, { id: "old_0" });
    expect(await fresh.result()).toBe(12);
    await again.close();
  });

  it("gc leaves no row of a collected run in any table (attempts, intents, approvals included); waiting, paused and recent runs keep all of theirs", async () => {
    const h = harness();
    const past = createVirtualClock(h.clock.now() - 40 * DAY);
    const old = h.store();
    await old.open({ clock: past });
    const gone = ["gone-completed", "gone-failed", "gone-canceled"];
    for (const id of [...gone, "old-waiting", "old-paused"]) {
      await old.createRun({ id, workflow: "old", version: "1", input: "[1]", budgetLimit: {} });
    }
    const claimed = await old.claimRuns({
      workerId: "seeder",
      workflows: ["old@1"],
      limit: 10,
      leaseMs: 60_000,
    });
    expect(claimed).toHaveLength(5);
    for (const { run } of claimed) {
      await seedEveryRecord(old, run, past.now());
      const release =
        run.id === "old-waiting"
          ? { status: "waiting" as const, waitingFor: ["never"] }
          : run.id === "old-paused"
            ? { status: "paused" as const, reason: "budget" }
            : run.id === "gone-completed"
              ? { status: "completed" as const, output: "[1]" }
              : run.id === "gone-failed"
                ? { status: "failed" as const, error: { name: "Error", message: "x" } }
                : { status: "canceled" as const };
      await old.releaseRun({ runId: run.id, epoch: run.epoch, readyAt: null, ...release });
    }
    await old.close();

    const now = h.store();
    await now.open({ clock: h.clock });
    await now.createRun({
      id: "recent",
      workflow: "old",
      version: "1",
      input: "[1]",
      budgetLimit: {},
    });
    const [recent] = await now.claimRuns({
      workerId: "seeder",
      workflows: ["old@1"],
      limit: 10,
      leaseMs: 60_000,
    });
    expect(recent?.run.id).toBe("recent");
    await seedEveryRecord(now, recent!.run, h.clock.now());
    await now.releaseRun({
      runId: "recent",
      epoch: recent!.run.epoch,
      status: "completed",
      readyAt: null,
      output: "[1]",
    });

    const ids = [...gone, "old-waiting", "old-paused", "recent"];
    const before = await rowsByRun(now, backend, ids);
    // Each run holds a row of every kind (the approval's answer is an event of its own).
    for (const id of ids) {
      expect(before[id], id).toMatchObject({
        steps: 1,
        attempts: 1,
        intents: 1,
        events: 2,
        run_streams: 1,
        approvals: 1,
      });
    }

    const engine = h.engine([], { worker: false });
    const res = await engine.gc({ olderThan: "30d" });
    expect(res.runs).toBe(3);
    const after = await rowsByRun(now, backend, ids);
    for (const id of gone) {
      expect(await now.getRun(id), id).toBeUndefined();
      expect(
        Object.entries(after[id]!).filter(([, n]) => n > 0),
        id,
      ).toEqual([]);
      expect(await now.listApprovals(id), id).toEqual([]);
      expect(await now.loadJournal(id), id).toEqual({
        steps: [],
        attempts: [],
        intents: [],
        events: [],
      });
    }
    for (const id of ["old-waiting", "old-paused", "recent"]) {
      expect(after[id], id).toEqual(before[id]);
      expect(
        (await now.listApprovals(id)).map((a) => a.status),
        id,
      ).toEqual(["approved"]);
    }
    expect((await now.getRun("old-waiting"))?.status).toBe("waiting");
    expect((await now.getRun("old-paused"))?.status).toBe("paused");
    expect((await now.getRun("recent"))?.status).toBe("completed");
    await now.close();
  });

  it("the engine's retention option deletes finished runs in the worker, on its schedule", async () => {
    const h = harness();
    const wf = workflow({ name: "short", version: "1" }, async (ctx, wait: boolean) => {
      if (wait) await ctx.waitForEvent("never");
      return "done";
    });
    const engine = h.engine([wf], { retention: { finishedOlderThan: "1d", every: "1h" } });
    const done = await engine.start(wf, false, { id: "done" });
    await done.result();
    await engine.start(wf, true, { id: "waits" });
    await expect.poll(async () => (await engine.getRun("waits"))?.status).toBe("waiting");
    // 23 hours on, "done" is not yet a day old: the worker's hourly batches keep it.
    for (let i = 0; i < 23; i++) {
      await h.clock.advance(3_600_000);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await engine.getRun("done")).toBeDefined();
    for (let i = 0; i < 7 && (await engine.getRun("done")); i++) {
      await h.clock.advance(3_600_000);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await engine.getRun("done")).toBeUndefined();
    expect((await engine.getRun("waits"))?.status).toBe("waiting");
  });

  it("refuses bad retention settings by name", () => {
    const h = harness();
    expect(() => h.engine([], { retention: { finishedOlderThan: "soon" } })).toThrow(
      /retention.finishedOlderThan: cannot parse "soon"/,
    );
  });
});

describe("cairn gc", () => {
  it("--dry-run counts, a real run deletes; usage errors name the flag", async () => {
    const t = tempDir("cairn-gc-cli-");
    const path = join(t.dir, "cairn.db");
    const clock = createVirtualClock(Date.now() - 40 * DAY);
    const { sqliteStore } = await import("../src/index.js");
    const store = sqliteStore(path);
    await store.open({ clock });
    await seedOld(store, 3, "cli_");
    await store.close();
    try {
      const dry = await cairn(["gc", "--store", path, "--older-than", "30d", "--dry-run"]);
      expect(dry.stdout).toMatch(/Would delete 3 finished run\(s\)/);
      expect(dry.code).toBe(0);
      const json = await cairn(["gc", "--store", path, "--older-than", "30d", "--json"]);
      expect(JSON.parse(json.stdout)).toMatchObject({ runs: 3, dryRun: false });
      const none = await cairn(["gc", "--store", path, "--older-than", "30d"]);
      expect(none.stdout).toMatch(/Deleted 0 finished run\(s\)/);
      const bad = await cairn(["gc", "--store", path, "--older-than", "soon"]);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/--older-than "soon": use a number and a unit/);
      const missing = await cairn(["gc", "--store", path]);
      expect(missing.stderr).toMatch(/gc needs --older-than/);
    } finally {
      t.cleanup();
    }
  });
});
