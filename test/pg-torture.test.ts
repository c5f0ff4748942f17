// PostgreSQL torture: many worker processes on one database (connections cut and a server
// restart live in pg-restart.test.ts).
//   2. Four workers share 1,200 runs while a controller SIGKILLs one every few hundred ms:
//      every run completes, no journal row is doubled, and an idempotent provider keyed by
//      s.idempotencyKey applies every key once; the duplicate step executions the kills
//      caused are counted (they exist, and the key absorbs every one).
//   3. A zombie: a worker stopped (SIGSTOP) past its lease while in a step; another claims
//      and finishes the run; the zombie, continued, lands nothing in the journal.
//   5. 400 runs sleep or wait for an event while three workers are stopped (SIGTERM) and
//      replaced: each wakes once, no sooner than its timer, and each waiter gets the payload
//      sent to it; a closing worker starts no step, so none is cut and run twice.
// Each test has its own schema, dropped at the end. CAIRN_SOAK=1 makes them bigger (10,000
// and 5,000 runs, 400 kills, 25 zombie cycles per mode); the default run was 2,000 and 1,000
// runs, 40 kills (each waits for its replacement worker to start) and 3 cycles until the
// suite outgrew its ten minutes.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { decode } from "../src/codec/codec.js";
import { createEngine, type Engine } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import {
  type NapInput,
  napper,
  Provider,
  torture,
  useProvider,
  zombie,
} from "./fixtures/pg-workflows.js";
import { pool } from "./helpers/child.js";
import {
  describeCounts,
  expectJournalAndLedgerExact,
  Fleet,
  kill,
  statusCounts,
  stop,
  taggedUrl,
  waitFor,
} from "./helpers/pg-fleet.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { recordTortureCounts } from "./helpers/torture-counts.js";

const url = await postgresTestUrl();
const SOAK = process.env.CAIRN_SOAK === "1";

/** A schema with the provider's tables, a client engine (worker: false) on it, and a
 *  connection for the test's own queries; all closed and dropped by `cleanup`. */
async function setup(base: string): Promise<{
  schema: string;
  client: Engine;
  db: pg.Client;
  cleanup: () => Promise<void>;
}> {
  const { schema, drop } = testSchema(base, "cairn_torture");
  await withClient(base, (c) => Provider.createTables(c, schema));
  const client = createEngine({
    store: postgresStore(base, { schema, poolSize: 4 }),
    worker: false,
  });
  const db = new pg.Client({ connectionString: base });
  db.on("error", () => {});
  await db.connect();
  return {
    schema,
    client,
    db,
    cleanup: async () => {
      await client.close().catch(() => {});
      await db.end().catch(() => {});
      await drop();
    },
  };
}

const describePg = url ? describe : describe.skip;

describePg("PostgreSQL torture: many worker processes on one database", () => {
  const base = url ?? "";

  it(
    "2. four workers, SIGKILLed at random and replaced, finish every run once",
    async () => {
      const runs = SOAK ? 10_000 : 1_200;
      const steps = 5;
      const { schema, client, db, cleanup } = await setup(base);
      const { url: workerUrl } = taggedUrl(base);
      const fleet = new Fleet(workerUrl, schema, {
        concurrency: 16,
        leaseMs: 1_500,
        pollIntervalMs: 50,
        poolSize: 6,
      });
      let kills = 0;
      try {
        await Promise.all(Array.from({ length: 4 }, () => fleet.spawn()));
        const ids = Array.from({ length: runs }, (_, i) => `t-${i}`);
        const t0 = Date.now();
        let started = false;
        const starting = pool(ids, 16, async (id) => {
          await client.start(torture, { steps }, { id });
        }).then(() => {
          started = true;
        });
        const completed = async () =>
          Number(
            (
              await db.query<{ n: string }>(
                `SELECT count(*) AS n FROM "${schema}".runs WHERE status = 'completed'`,
              )
            ).rows[0]?.n,
          );
        // The controller: every 200-500 ms SIGKILL a random ready worker and start a
        // replacement, until every run completed (or the kill budget is spent; then the
        // survivors finish the rest).
        const maxKills = SOAK ? 400 : 20;
        const deadline = Date.now() + (SOAK ? 1_200_000 : 150_000);
        while (Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 200 + Math.random() * 300));
          if (started && (await completed()) === runs) break;
          if (kills >= maxKills) continue;
          const ready = fleet.live().filter((w) => w.stdout().includes("ready "));
          const victim = ready[Math.floor(Math.random() * ready.length)];
          if (!victim || fleet.live().length < 4) continue;
          await kill(victim);
          kills++;
          fleet.spawnNoWait();
        }
        await starting;
        const elapsedMs = Date.now() - t0;
        expect(
          describeCounts(await statusCounts(db, schema)),
          "every run completed within the deadline",
        ).toBe(`completed ${runs}`);
        await fleet.killAll();

        // Exactly runs x steps journal rows and provider keys, each once, though some
        // step bodies ran twice (counted below).
        await expectJournalAndLedgerExact(db, schema, runs * steps, (d, what) =>
          expect(d, what).toBe(0),
        );
        const a = await db.query<{ calls: string; keys: string; twice: string }>(
          `SELECT sum(n) AS calls, count(*) AS keys, count(*) FILTER (WHERE n > 1) AS twice
            FROM (SELECT key, count(*) AS n FROM "${schema}".attempts_log GROUP BY key) k`,
        );
        const calls = Number(a.rows[0]?.calls);
        const duplicates = calls - Number(a.rows[0]?.keys);
        expect(Number(a.rows[0]?.keys)).toBe(runs * steps);

        // Every recorded step result is the provider's answer for its key: what the run saw
        // is what the provider kept, however many times the body ran.
        const mismatched = await db.query<{ key: string; result: string; pid: number }>(
          `SELECT s.run_id, s.key, s.result, l.pid
            FROM "${schema}".steps s
            JOIN "${schema}".ledger l ON l.run_id = s.run_id
              AND s.key = CASE WHEN l.step = 's0' THEN 's'
                ELSE 's#' || (substr(l.step, 2)::int + 1) END`,
        );
        expect(mismatched.rows.length).toBe(runs * steps);
        const wrong = mismatched.rows.filter((r) => decode<number>(r.result) !== r.pid);
        expect(wrong).toEqual([]);

        const lost = await db.query<{ n: string }>(
          `SELECT count(*) AS n FROM "${schema}".attempts WHERE error::jsonb ->> 2 = 'WORKER_LOST'`,
        );
        console.log(
          `[pg-torture 2] ${runs} runs x ${steps} steps, 4 workers, ${kills} SIGKILLs, ` +
            `${fleet.all.length} worker processes in all, ${(elapsedMs / 1000).toFixed(1)} s: ` +
            `${calls} provider calls for ${runs * steps} keys = ${duplicates} duplicate step ` +
            `executions (${a.rows[0]?.twice} keys called more than once), all absorbed by the ` +
            `key; ${lost.rows[0]?.n} attempts recorded as WORKER_LOST`,
        );
        recordTortureCounts("pg-torture 2 (4 workers)", { kills, runs });
        expect(kills).toBeGreaterThan(0);
        expect(duplicates).toBeGreaterThan(0);
      } finally {
        await fleet.killAll();
        await cleanup();
      }
    },
    SOAK ? 1_500_000 : 200_000,
  );

  it(
    "3. a zombie worker stopped past its lease lands nothing once another worker took over",
    async () => {
      const cyclesPerMode = SOAK ? 25 : 2;
      const { schema, client, db, cleanup } = await setup(base);
      const { url: workerUrl } = taggedUrl(base);
      const provider = new Provider(base, schema);
      useProvider(provider);
      // In this process (worker B) the first step is quick; in A it lingers 1.5 s, so A is
      // stopped inside it and its step ends after B's claim.
      const slow = { CAIRN_PG_SLOW_MS: "1500" };
      const opts = { concurrency: 4, leaseMs: 1_000, pollIntervalMs: 50, poolSize: 3 };
      // Two zombies: one renews its leases (it may learn of the loss from a renewal first),
      // one never does (heartbeatMs far beyond the test), so only the fence can stop it.
      const modes = [
        { name: "heartbeating", fleet: new Fleet(workerUrl, schema, opts, slow) },
        {
          name: "fence-only",
          fleet: new Fleet(workerUrl, schema, { ...opts, heartbeatMs: 600_000 }, slow),
        },
      ];
      const dbNow = async () =>
        Number(
          (
            await db.query<{ now: string }>(
              "SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint AS now",
            )
          ).rows[0]?.now,
        );
      const outcomes: Array<{
        id: string;
        a: number;
        mode: string;
        epoch: number;
        contAt: number;
      }> = [];
      const rejected: Record<string, number> = { heartbeating: 0, "fence-only": 0 };
      const lateCalls: Record<string, number> = { heartbeating: 0, "fence-only": 0 };
      try {
        for (const mode of modes) {
          const a = await mode.fleet.spawn();
          for (let cycle = 0; cycle < cyclesPerMode; cycle++) {
            const id = `z-${mode.name}-${cycle}`;
            await client.start(zombie, undefined, { id });
            // A is inside step 1 (it logged the call, and applies it 1.5 s later).
            await waitFor(
              async () =>
                (
                  await db.query(
                    `SELECT 1 FROM "${schema}".attempts_log WHERE run_id = $1 AND pid = $2`,
                    [id, a.pid],
                  )
                ).rowCount,
              `worker A to start the first step of "${id}"`,
              15_000,
              { intervalMs: 10 },
            );
            a.child.kill("SIGSTOP");
            let b: Engine | undefined;
            try {
              await waitFor(
                async () =>
                  (
                    await db.query(
                      `SELECT 1 FROM "${schema}".runs WHERE id = $1 AND status = 'running'
                        AND lease_until < floor(extract(epoch from clock_timestamp()) * 1000)`,
                      [id],
                    )
                  ).rowCount,
                `the lease of "${id}" to expire while A is stopped`,
                10_000,
              );
              b = createEngine({
                store: postgresStore(base, { schema, poolSize: 3 }),
                workflows: [zombie],
                leaseMs: 10_000,
                pollIntervalMs: 50,
              });
              const out = await b.handle<Array<{ pid: number }>>(id).result();
              expect(out.map((s) => s.pid)).toEqual([process.pid, process.pid, process.pid]);
            } finally {
              await b?.close();
            }
            const epoch = Number(
              (await db.query(`SELECT epoch FROM "${schema}".runs WHERE id = $1`, [id])).rows[0]
                ?.epoch,
            );
            const contAt = await dbNow();
            a.child.kill("SIGCONT");
            if (mode.name === "fence-only") {
              // A finishes its step, and its record is refused by the fence.
              await waitFor(
                () => a.stdout().includes(`rejected ${id} lease-lost`),
                `zombie A's write for "${id}" to be refused`,
                15_000,
                { detail: () => a.stderr().slice(-2_000) },
              );
            } else {
              // A's next renewal has told it the lease is gone (it renews leases, then its
              // worker row, in one heartbeat).
              await waitFor(
                async () =>
                  (
                    await db.query(
                      `SELECT 1 FROM "${schema}".workers WHERE pid = $1 AND heartbeat_at > $2`,
                      [a.pid, contAt],
                    )
                  ).rowCount,
                `zombie A to heartbeat after SIGCONT ("${id}")`,
                15_000,
              );
            }
            outcomes.push({ id, a: a.pid, mode: mode.name, epoch, contAt });
          }
          // Whatever A still had in flight has had time to show up by the next cycle's end;
          // wait for the last cycle's own step body to end too, then stop A.
          await waitFor(
            async () =>
              (
                await db.query(
                  `SELECT 1 FROM "${schema}".attempts_log WHERE pid = $1 AND step = 'z0'
                    AND run_id = $2 AND at > to_timestamp($3 / 1000.0)`,
                  [a.pid, outcomes.at(-1)?.id, outcomes.at(-1)?.contAt],
                )
              ).rowCount || mode.name === "heartbeating",
            "the zombie's last step body to end",
            15_000,
          );
          rejected[mode.name] = a
            .stdout()
            .split("\n")
            .filter((l) => l.endsWith(" lease-lost")).length;
          await mode.fleet.killAll();
        }

        for (const o of outcomes) {
          const run = await db.query<{ status: string; epoch: string; output: string }>(
            `SELECT status, epoch, output FROM "${schema}".runs WHERE id = $1`,
            [o.id],
          );
          expect(run.rows[0]?.status, o.id).toBe("completed");
          // Nothing claimed or released the run after B: the zombie's epoch is stale.
          expect(Number(run.rows[0]?.epoch), o.id).toBe(o.epoch);
          const out = decode<Array<{ pid: number; appliedBy: number }>>(run.rows[0]?.output ?? "");
          expect(out, o.id).toEqual(
            Array.from({ length: 3 }, () => ({ pid: process.pid, appliedBy: process.pid })),
          );
          // The journal holds B's results only: no row from A, before or after B's claim.
          const steps = await db.query<{ key: string; result: string }>(
            `SELECT key, result FROM "${schema}".steps WHERE run_id = $1 ORDER BY seq`,
            [o.id],
          );
          expect(
            steps.rows.map((r) => r.key),
            o.id,
          ).toEqual(["z", "z#2", "z#3"]);
          for (const r of steps.rows) {
            expect(decode<{ pid: number }>(r.result).pid, `${o.id} ${r.key}`).toBe(process.pid);
          }
          // The provider kept B's application of every key; A's late call (if its step body
          // went on after SIGCONT) was absorbed by the key.
          const ledger = await db.query<{ pid: number }>(
            `SELECT pid FROM "${schema}".ledger WHERE run_id = $1`,
            [o.id],
          );
          expect(
            ledger.rows.map((r) => r.pid),
            o.id,
          ).toEqual([process.pid, process.pid, process.pid]);
          const late = await db.query(
            `SELECT 1 FROM "${schema}".attempts_log WHERE run_id = $1 AND pid = $2
              AND at > to_timestamp($3 / 1000.0)`,
            [o.id, o.a, o.contAt],
          );
          lateCalls[o.mode] = (lateCalls[o.mode] ?? 0) + (late.rowCount ?? 0);
        }
        const fenceOnly = outcomes.filter((o) => o.mode === "fence-only").length;
        // Every fence-only zombie tried to record its step, and was refused.
        expect(rejected["fence-only"]).toBeGreaterThanOrEqual(fenceOnly);
        console.log(
          `[pg-torture 3] ${outcomes.length} zombie cycles, 0 zombie journal rows landed. ` +
            `Heartbeating zombies: ${rejected.heartbeating} writes refused by the fence, ` +
            `${lateCalls.heartbeating} provider calls after SIGCONT. Fence-only zombies: ` +
            `${rejected["fence-only"]} writes refused by the fence, ${lateCalls["fence-only"]} ` +
            "provider calls after SIGCONT (absorbed by the idempotency key)",
        );
      } finally {
        for (const m of modes) {
          for (const w of m.fleet.live()) w.child.kill("SIGCONT");
          await m.fleet.killAll();
        }
        useProvider(undefined);
        await provider.close();
        await cleanup();
      }
    },
    SOAK ? 900_000 : 120_000,
  );

  it(
    "5. hundreds of runs sleep or wait across three workers: each wakes once, events arrive once",
    async () => {
      const runs = SOAK ? 5_000 : 400;
      const { schema, client, db, cleanup } = await setup(base);
      const { url: workerUrl } = taggedUrl(base);
      // A generous lease: a run's step after its wake-up may legitimately run twice if its
      // lease expires mid-step (invariant 6), so none must expire here by accident.
      const fleet = new Fleet(workerUrl, schema, {
        concurrency: 64,
        leaseMs: 15_000,
        pollIntervalMs: 100,
        poolSize: 6,
      });
      try {
        // Once told to stop, the first workers take 10 s for any wake-up step they start,
        // twice their 5 s grace period: a worker that still started steps while closing would
        // have them cut mid-flight and run again elsewhere (the double execution a 5,000-run
        // soak found). A closing worker starts no step, so nothing is cut.
        const slow = { CAIRN_TEST_CLOSING_WAKE_MS: "10000" };
        const first = await Promise.all(Array.from({ length: 3 }, () => fleet.spawn(slow)));
        const plan = Array.from({ length: runs }, (_, i) => {
          const id = `n-${i}`;
          const input: NapInput =
            i % 2 === 0 ? { mode: "sleep", ms: 500 + ((i * 7919) % 2_500) } : { mode: "wait" };
          // Half of the waiters get their event at once (most before they reach the wait),
          // the other half once they are waiting.
          const early = i % 4 === 1;
          return { id, input, early };
        });
        // The replacements are ready before the runs start, so the first workers are told to
        // stop while runs wake up on them.
        await Promise.all(Array.from({ length: 3 }, () => fleet.spawn()));
        await pool(plan, 16, async (p) => {
          await client.start(napper, p.input, { id: p.id });
          if (p.early) await client.sendEvent(p.id, "go", `go-${p.id}`);
        });
        // Timers are rows, not processes: replace every worker while runs sleep.
        await Promise.all(first.map(async (w) => expect(await stop(w)).toBe(0)));
        const late = plan.filter((p) => p.input.mode === "wait" && !p.early);
        const lateIds = late.map((p) => p.id);
        await waitFor(
          async () =>
            Number(
              (
                await db.query<{ n: string }>(
                  `SELECT count(*) AS n FROM "${schema}".runs
                    WHERE id = ANY($1::text[]) AND status = 'waiting'`,
                  [lateIds],
                )
              ).rows[0]?.n,
            ) === late.length,
          "every late waiter to be waiting",
          90_000,
          { detail: async () => describeCounts(await statusCounts(db, schema)) },
        );
        // Invariant 7: a waiting run holds no lease.
        const leased = await db.query(
          `SELECT id FROM "${schema}".runs WHERE status = 'waiting' AND lease_owner IS NOT NULL`,
        );
        expect(leased.rows).toEqual([]);
        await pool(late, 16, async (p) => {
          await client.sendEvent(p.id, "go", `go-${p.id}`);
        });
        await waitFor(
          async () => (await statusCounts(db, schema)).get("completed") === runs,
          `all ${runs} runs to complete`,
          120_000,
          { detail: async () => describeCounts(await statusCounts(db, schema)) },
        );
        expect(describeCounts(await statusCounts(db, schema))).toBe(`completed ${runs}`);

        // Each run's step after its sleep or wait executed exactly once.
        const wakes = await db.query<{ run_id: string; n: string; payload: string | null }>(
          `SELECT run_id, count(*) AS n, min(payload) AS payload FROM "${schema}".wakes
            GROUP BY run_id`,
        );
        expect(wakes.rows.length).toBe(runs);
        expect(wakes.rows.filter((r) => Number(r.n) !== 1)).toEqual([]);
        const payloadOf = new Map(wakes.rows.map((r) => [r.run_id, r.payload]));
        // Each waiter received the payload sent to it; sleepers none.
        const wrongPayload = plan.filter(
          (p) => payloadOf.get(p.id) !== (p.input.mode === "wait" ? `go-${p.id}` : null),
        );
        expect(wrongPayload.map((p) => p.id)).toEqual([]);
        // Every event was consumed once, by the wait it was meant for.
        const events = await db.query<{ run_id: string; consumed_by: string | null }>(
          `SELECT run_id, consumed_by FROM "${schema}".events`,
        );
        expect(events.rows.length).toBe(runs / 2);
        expect(events.rows.filter((e) => e.consumed_by !== "go")).toEqual([]);
        expect(new Set(events.rows.map((e) => e.run_id)).size).toBe(runs / 2);
        // No timer fired early: the wake-up came at least `ms` after the sleep began.
        const naps = await db.query<{ run_id: string; at_ms: string; created_at: string }>(
          `SELECT w.run_id, w.at_ms, i.created_at FROM "${schema}".wakes w
            JOIN "${schema}".intents i ON i.run_id = w.run_id AND i.key = 'nap'`,
        );
        expect(naps.rows.length).toBe(runs / 2);
        const msOf = new Map(plan.map((p) => [p.id, p.input.mode === "sleep" ? p.input.ms : 0]));
        const early = naps.rows.filter(
          (r) => Number(r.at_ms) < Number(r.created_at) + (msOf.get(r.run_id) ?? 0),
        );
        expect(early).toEqual([]);
        const outputs = await db.query<{ id: string; output: string }>(
          `SELECT id, output FROM "${schema}".runs`,
        );
        const wrongOutput = outputs.rows.filter((r) => decode(r.output) !== payloadOf.get(r.id));
        expect(wrongOutput).toEqual([]);
        console.log(
          `[pg-torture 5] ${runs} runs (${runs / 2} sleeps of 0.5-3 s, ${runs / 2} waits, ` +
            `${runs / 4} events sent before the wait), 3 workers replaced by 3 others while ` +
            `the runs slept: each woke once, ${events.rows.length} events consumed once each`,
        );
      } finally {
        await fleet.killAll();
        await cleanup();
      }
    },
    SOAK ? 900_000 : 180_000,
  );
});
