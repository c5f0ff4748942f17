// PostgreSQL migration 27 dropped steps' foreign key to runs; each insert of a step is
// fenced on its run's row instead, and the deletes of runs delete their steps in a later
// statement (workspace.ts, deleteRunRows). Attacked here with real verbs on two stores (two
// pools, as two processes): late writes of a finished run's own epoch (the lone INSERT,
// append_records with an attempt, with spend), forks copying its steps, and retention's
// deleteRuns and deleteRun of it, all at once. Counted after each round: steps whose run is
// gone (none may be), and every write's outcome agrees with what stayed.

import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { Store } from "../src/store/store.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { claimedRun, stepOf } from "./helpers/step-records.js";

const url = await postgresTestUrl();

describe.skipIf(!url)("steps without a foreign key: writes and forks racing deletes", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function stores(): Promise<{ a: Store; b: Store; schema: string }> {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const a = postgresStore(base, { schema: t.schema, poolSize: 6 });
    const b = postgresStore(base, { schema: t.schema, poolSize: 6 });
    await a.open({ clock: realClock });
    await b.open({ clock: realClock });
    cleanups.push(
      () => a.close(),
      () => b.close(),
    );
    return { a, b, schema: t.schema };
  }

  const orphans = (schema: string) =>
    withClient(base, async (c) => {
      const r = await c.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".steps s
          WHERE NOT EXISTS (SELECT 1 FROM "${schema}".runs r WHERE r.id = s.run_id)`,
      );
      return r.rows[0]!.n;
    });

  it("late writes, forks and deletes of finished runs at once leave no step without its run", async () => {
    const { a, b, schema } = await stores();
    const ROUNDS = 6;
    const RUNS = 8;
    let landedThenDeleted = 0;
    let forksMade = 0;
    let refusedAsLost = 0;
    let forksRefused = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const runs: Awaited<ReturnType<typeof claimedRun>>[] = [];
      for (let i = 0; i < RUNS; i++) {
        const run = await claimedRun(a, `r${round}_${i}`);
        await a.appendRecords([
          { runId: run.id, epoch: run.epoch, steps: [stepOf(run.id, "first", 0)] },
        ]);
        expect(
          await a.releaseRun({
            runId: run.id,
            epoch: run.epoch,
            status: "completed",
            readyAt: null,
          }),
        ).toMatchObject({ ok: true });
        runs.push(run);
      }
      const startWrites = () =>
        runs.flatMap((run) => [
          // The lone INSERT (a step alone), append_records (with an attempt; with spend).
          ...[1, 2, 3].map((k) =>
            a.appendRecords([
              { runId: run.id, epoch: run.epoch, steps: [stepOf(run.id, `late${k}`, k)] },
            ]),
          ),
          a.appendRecords([
            {
              runId: run.id,
              epoch: run.epoch,
              steps: [stepOf(run.id, "late4", 4)],
              attempts: [
                {
                  runId: run.id,
                  key: "late4",
                  generation: 0,
                  attempt: 1,
                  startedAt: 1,
                  endedAt: 2,
                  error: { name: "Error", message: "first try failed" },
                  spend: {},
                  retryAt: null,
                },
              ],
            },
          ]),
          b.appendRecords([
            {
              runId: run.id,
              epoch: run.epoch,
              steps: [stepOf(run.id, "late5", 5, { spend: { tokens: 3 } })],
            },
          ]),
        ]);
      const startForks = () =>
        runs.map((run, i) =>
          b.forkRun!({
            sourceId: run.id,
            run: {
              id: `f${round}_${i}`,
              workflow: "alpha",
              version: "1",
              input: "{}",
              budgetLimit: {},
            },
            copy: [{ key: "first", generation: 0 }],
          }).then(
            (f) => f,
            (e: unknown) => e,
          ),
        );
      const half = runs.length / 2;
      const startDeletes = () => [
        b.deleteRuns(runs.slice(0, half).map((r) => r.id)),
        ...runs.slice(half).map((r) => a.deleteRun(r.id)),
      ];
      // Odd rounds send the deletes first: the writes then meet runs locked or gone.
      let writes: ReturnType<typeof startWrites>;
      let forks: ReturnType<typeof startForks>;
      let deletes: ReturnType<typeof startDeletes>;
      if (round % 2 === 1) {
        deletes = startDeletes();
        writes = startWrites();
        forks = startForks();
      } else {
        writes = startWrites();
        forks = startForks();
        deletes = startDeletes();
      }
      const [w, f, d] = await Promise.all([
        Promise.all(writes),
        Promise.all(forks),
        Promise.allSettled(deletes),
      ]);
      for (const x of d) expect(x.status).toBe("fulfilled");
      expect(await orphans(schema)).toBe(0);
      // A write that landed was taken by the delete (its run is gone, and so are its steps);
      // one that did not was told so (the lease lost).
      for (const outs of w) {
        for (const o of outs) {
          if (o.ok) landedThenDeleted += 1;
          else {
            expect(o).toMatchObject({ ok: false, reason: "lease-lost" });
            refusedAsLost += 1;
          }
        }
      }
      for (const x of f) {
        if (x instanceof Error) {
          expect(x.message).toMatch(/nothing to fork|not found/i);
          forksRefused += 1;
        } else {
          forksMade += 1;
          const steps = await a.loadJournal((x as { run: { id: string } }).run.id);
          expect(steps.steps.map((s) => s.key)).toEqual(["first"]);
        }
      }
      // Every source run is gone (none had children), with all its steps.
      const left = await withClient(base, (c) =>
        c.query(`SELECT count(*)::int AS n FROM "${schema}".steps WHERE run_id LIKE $1`, [
          `r${round}\\_%`,
        ]),
      );
      expect(left.rows[0].n).toBe(0);
    }
    // Both orders happened (else the race was not run): some late writes landed before their
    // run's delete and went with it, some came after it and were refused.
    expect(landedThenDeleted).toBeGreaterThan(0);
    expect(refusedAsLost).toBeGreaterThan(0);
    expect(forksMade + forksRefused).toBe(ROUNDS * RUNS);
    console.log({ landedThenDeleted, refusedAsLost, forksMade, forksRefused });
  }, 120_000);
});
