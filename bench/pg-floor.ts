// What the PostgreSQL benches that weigh a sequential 20-step run against the raw floor share
// (pg-step-gap.ts, pg-cpu-per-run.ts): the database they measure on, a run of cairn checked
// for its sum, the floor (the same 20 rows as single-row INSERTs, one transaction each, on
// one connection of its own), and the set-up and tear-down of the schema both write to.

import pg from "pg";
import type { Engine } from "../src/index.js";
import { expectedSum, loop } from "./workflows.js";

/** The steps of a run, cairn's and the floor's. */
export const STEPS = 20;

/** The database: the bench's argument, else CAIRN_TEST_POSTGRES_URL, else the local test one. */
export function benchPgUrl(arg: string | undefined): string {
  return arg ?? process.env.CAIRN_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
}

/** For the bench `name` on `engine` (serving `loop`, its store on `schema` of `url`). */
/** `pad`: fields added to each cairn run's input (pg-cpu-per-run's INPUT_BYTES). */
export function pgFloor(
  name: string,
  url: string,
  schema: string,
  engine: Engine,
  pad?: Record<string, unknown>,
) {
  const raw = new pg.Client({ connectionString: url });
  let rawRuns = 0;
  return {
    /** One run of STEPS steps, started and awaited; its sum checked. */
    async cairnRun(): Promise<void> {
      const out = await (await engine.start(loop, { steps: STEPS, ...pad })).result();
      if (out !== expectedSum(STEPS)) throw new Error(`${name}: a run returned ${String(out)}`);
    },
    /** The rows a cairn step writes, with the same columns filled (no run row: the raw table
     *  has steps' indexes and, as steps since migration 27, no foreign key to runs). */
    async floorRun(): Promise<void> {
      const runId = `raw-${++rawRuns}`;
      for (let i = 0; i < STEPS; i++) {
        const t = Date.now();
        await raw.query(
          `INSERT INTO "${schema}".raw_steps (run_id, key, generation, seq, name, kind, outcome,
              result, attempt, started_at, completed_at)
            VALUES ($1, $2, 0, $3, 's', 'step', 'ok', $4, 1, $5, $6)`,
          [runId, `s#${i}`, i, `[{"i":1},${i}]`, t, t],
        );
      }
    },
    /** Connects the floor's client, opens the engine's store (a run of no step: the schema
     *  exists after) and makes the floor's table beside its steps. */
    async open(): Promise<void> {
      await raw.connect();
      await engine.start(loop, { steps: 0 });
      await new Promise((r) => setTimeout(r, 200));
      await raw.query(
        `CREATE TABLE IF NOT EXISTS "${schema}".raw_steps (LIKE "${schema}".steps INCLUDING ALL)`,
      );
    },
    /** Closes the engine, drops the schema (saying so when it cannot) and the client. */
    async close(): Promise<void> {
      await engine.close();
      await raw
        .query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
        .catch((err) => console.error(`${name}: schema ${schema} left behind: ${String(err)}`));
      await raw.end().catch(() => {});
    },
  };
}
