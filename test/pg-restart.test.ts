// PostgreSQL torture: connections lost at any moment, and a server restart. Three worker
// processes execute 200 runs while every ~200 ms the server terminates all of their
// connections (pool, LISTEN and the provider's), and once, mid-run, the whole PostgreSQL
// server restarts. Every run completes; no journal row
// is doubled or lost; the idempotent provider applied every key once.
//
// A restart drops EVERY connection on the server, so this file runs alone: vitest.config.ts
// puts it in the "serial" project, whose group starts after all other test files finished.
// Whatever happens, afterAll waits until the server accepts connections again.

import { execFile } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { decode } from "../src/codec/codec.js";
import { createEngine } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { Provider, torture } from "./fixtures/pg-workflows.js";
import { pool } from "./helpers/child.js";
import {
  describeCounts,
  expectJournalAndLedgerExact,
  Fleet,
  statusCounts,
  taggedUrl,
  type WorkerProcess,
  waitFor,
} from "./helpers/pg-fleet.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";

const run = promisify(execFile);
const url = await postgresTestUrl();
const SOAK = process.env.CAIRN_SOAK === "1";

/** How to restart the test server: only a local Debian-style cluster (pg_ctlcluster, as
 *  root) is restarted; a remote server never is. */
function restartCommand(base: string): { version: string; host: string; port: string } | string {
  const u = new URL(base);
  const host = u.hostname;
  if (!["127.0.0.1", "localhost", "::1", "[::1]"].includes(host)) {
    return `the test database ${host} is not local`;
  }
  if (!existsSync("/etc/postgresql")) return "no /etc/postgresql (pg_ctlcluster) here";
  const version = readdirSync("/etc/postgresql").sort().at(-1);
  if (!version) return "no cluster under /etc/postgresql";
  return { version, host: host === "localhost" ? "127.0.0.1" : host, port: u.port || "5432" };
}

async function isReady(host: string, port: string): Promise<boolean> {
  try {
    await run("pg_isready", ["-h", host, "-p", port, "-t", "2"]);
    return true;
  } catch {
    return false;
  }
}

async function ensureUp(cmd: { version: string; host: string; port: string }): Promise<void> {
  const deadline = Date.now() + 60_000;
  let started = false;
  while (!(await isReady(cmd.host, cmd.port))) {
    if (Date.now() > deadline) {
      throw new Error(`PostgreSQL ${cmd.version}/main did not come back within 60 s`);
    }
    if (!started && Date.now() > deadline - 45_000) {
      // Still down 15 s after the restart: start it (a no-op error if it is starting).
      started = true;
      await run("pg_ctlcluster", ["--skip-systemctl-redirect", cmd.version, "main", "start"]).catch(
        () => undefined,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

const cmd = url ? restartCommand(url) : "no database";
afterAll(async () => {
  if (typeof cmd !== "string") await ensureUp(cmd);
});

const describePg = url ? describe : describe.skip;

describePg("PostgreSQL torture: terminated connections and a server restart", () => {
  const base = url ?? "";

  it(
    "4. every run completes through pg_terminate_backend every 200 ms and one restart",
    async () => {
      const runs = SOAK ? 2_000 : 200;
      const steps = 5;
      if (typeof cmd === "string") {
        const why = `cannot restart PostgreSQL here: ${cmd}`;
        if (process.env.CI === "true" && process.env.CAIRN_PG_RESTART !== "skip") {
          throw new Error(`${why} (set CAIRN_PG_RESTART=skip to run without the restart)`);
        }
        console.warn(`\n!! pg-restart: ${why}; only terminating connections\n`);
      }
      const { schema, drop } = testSchema(base, "cairn_restart");
      await withClient(base, (c) => Provider.createTables(c, schema));
      const { url: workerUrl, tag } = taggedUrl(base, "cairn-restart");
      const client = createEngine({
        store: postgresStore(base, { schema, poolSize: 4 }),
        worker: false,
      });
      const fleet = new Fleet(workerUrl, schema, {
        concurrency: 8,
        leaseMs: 1_500,
        pollIntervalMs: 50,
        poolSize: 6,
      });
      // The test's own queries use a fresh connection each, and tolerate the server being
      // away (they are asked again).
      const counts = async () => {
        try {
          return await withClient(base, (c) => statusCounts(c, schema));
        } catch {
          return undefined;
        }
      };
      let terminated = 0;
      let terminations = 0;
      let restartMs: number | undefined;
      let stopTerminating = false;
      // A supervisor, as systemd or Kubernetes would be: a worker process that exits is
      // replaced. None should exit; each crash is reported with its last words.
      const crashed = new Set<WorkerProcess>();
      const supervise = () => {
        for (const w of fleet.all) {
          if (!w.exited || crashed.has(w)) continue;
          crashed.add(w);
          fleet.spawnNoWait();
        }
      };
      const terminator = (async () => {
        while (!stopTerminating) {
          await new Promise((r) => setTimeout(r, 150 + Math.random() * 100));
          supervise();
          try {
            const r = await withClient(base, (c) =>
              c.query(
                `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()
                    AND application_name = $1`,
                [tag],
              ),
            );
            terminations++;
            terminated += r.rowCount ?? 0;
          } catch {
            // The server is restarting: try again at the next tick.
          }
        }
      })();
      try {
        await Promise.all(Array.from({ length: 3 }, () => fleet.spawn()));
        const t0 = Date.now();
        const ids = Array.from({ length: runs }, (_, i) => `r-${i}`);
        await pool(ids, 8, async (id) => {
          await client.start(torture, { steps, stepMs: 100 }, { id });
        });
        await client.close();
        if (typeof cmd !== "string") {
          await waitFor(
            async () => ((await counts())?.get("completed") ?? 0) >= runs / 3,
            "a third of the runs to complete before the restart",
            120_000,
          );
          const r0 = Date.now();
          await run("pg_ctlcluster", ["--skip-systemctl-redirect", cmd.version, "main", "restart"]);
          restartMs = Date.now() - r0;
          await ensureUp(cmd);
          const after = await counts();
          expect(after?.get("completed") ?? 0, "the restart came before the end").toBeLessThan(
            runs,
          );
        }
        await waitFor(
          async () => (await counts())?.get("completed") === runs,
          `all ${runs} runs to complete`,
          SOAK ? 1_200_000 : 150_000,
          { detail: async () => describeCounts((await counts()) ?? new Map()) },
        );
        const elapsedMs = Date.now() - t0;
        stopTerminating = true;
        await terminator;
        // A worker that died of it was replaced (so the proof above could finish) and now
        // fails the test. The one cause seen, an unhandled 'error' on a pooled client
        // terminated as it connected, has its own deterministic test in pg-bugs.test.ts.
        supervise();
        const crashes = [...crashed].map((w) => {
          const err = w.stderr();
          const lines = err.split("\n").map((l) => l.trim());
          const what = lines.find((l) => /^(\w*Error|error):/.test(l)) ?? lines.at(-3) ?? "";
          const how = err.includes("Unhandled 'error' event") ? "unhandled 'error' event: " : "";
          return `worker ${w.pid}: ${how}${what}`;
        });
        if (crashes.length > 0) {
          console.warn(
            `[pg-restart 4] ${crashes.length} worker process(es) crashed:\n${crashes.join("\n")}`,
          );
        }
        await fleet.killAll();

        await withClient(base, async (db) => {
          expect(describeCounts(await statusCounts(db, schema))).toBe(`completed ${runs}`);
          await expectJournalAndLedgerExact(db, schema, runs * steps, (d, what) =>
            expect(d, what).toBe(0),
          );
          // Each run's output is the provider's answer for each of its keys, in order.
          const outputs = await db.query<{ id: string; output: string; pids: number[] }>(
            `SELECT r.id, r.output, array_agg(l.pid ORDER BY substr(l.step, 2)::int) AS pids
              FROM "${schema}".runs r JOIN "${schema}".ledger l ON l.run_id = r.id
              GROUP BY r.id, r.output`,
          );
          expect(outputs.rows.length).toBe(runs);
          const wrong = outputs.rows.filter(
            (r) => JSON.stringify(decode(r.output)) !== JSON.stringify(r.pids),
          );
          expect(wrong).toEqual([]);
          const a = await db.query<{ calls: string; failed: string }>(
            `SELECT (SELECT count(*) FROM "${schema}".attempts_log) AS calls,
              (SELECT count(*) FROM "${schema}".attempts) AS failed`,
          );
          console.log(
            `[pg-restart 4] ${runs} runs x ${steps} steps, 3 workers ` +
              `(${crashes.length} crashed and were replaced), ` +
              `${(elapsedMs / 1000).toFixed(1)} s: ${terminations} termination rounds ended ` +
              `${terminated} worker backends; ` +
              (restartMs === undefined
                ? "no server restart; "
                : `one server restart (down and back in ${(restartMs / 1000).toFixed(1)} s); `) +
              `${a.rows[0]?.calls} provider calls for ${runs * steps} keys, ` +
              `${a.rows[0]?.failed} failed or crashed attempts recorded; nothing lost or doubled`,
          );
          expect(terminated).toBeGreaterThan(0);
          expect(crashes, "worker processes that crashed").toEqual([]);
        });
      } finally {
        stopTerminating = true;
        await terminator;
        await fleet.killAll();
        await client.close().catch(() => {});
        if (typeof cmd !== "string") await ensureUp(cmd);
        await drop();
      }
    },
    SOAK ? 1_500_000 : 240_000,
  );
});
