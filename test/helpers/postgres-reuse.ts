// Migrated PostgreSQL schemas reused within one test file. Migrating a fresh schema (all of
// the store's migrations: tables, indexes, functions) costs the server 0.2-0.8 s, and most
// PostgreSQL tests only want empty storage; so a schema a test is done with is emptied
// (rows deleted, the rows the migrations seeded put back, sequences restarted: one round
// trip) and handed to the file's next test. A schema is reused only when that is safe, else
// dropped as before:
// - its catalog (its tables' columns, indexes and constraints, its functions, its
//   schema_version rows) is exactly what the migrations make here: a test that altered or
//   reverted its schema gets a fresh one (a table a test added is not looked for);
// - no connection tagged with its name (application_name) is still open, so no store of the
//   previous test can write into the next test's rows.
// The pool's schemas are dropped after the file (afterAll, registered on import).
//
// What a just-migrated schema looks like is learned once per `vitest run` when
// test/helpers/postgres-shape-dir.ts (globalSetup) gives a directory to share it in, else
// once per file. Catalog reads go by oid or name through the catalog's indexes: a run
// creates and drops thousands of schemas, and scans of the bloated catalog were slower
// than the migrations they replace.

import { randomBytes } from "node:crypto";
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type pg from "pg";
import { afterAll } from "vitest";
import { realClock } from "../../src/lib/clock.js";
import { SCHEMA_VERSION } from "../../src/store/postgres/migrations/index.js";
import { postgresStore } from "../../src/store/postgres/postgres-store.js";
import { dropSchema, withClient } from "./postgres.js";

export interface ReusableSchema {
  schema: string;
  /** The database URL with application_name set to the schema's name: give it to every store
   *  on this schema (the release looks for connections still open by that tag). */
  url: string;
  /** Empties the schema for the next test (or drops it when it cannot be reused). Call it
   *  after every store on it has closed. */
  release: () => Promise<void>;
}

/** What a schema holds right after its migrations. */
interface Shape {
  catalog: string;
  /** Its relations (tables, indexes, sequences) and functions, by name. */
  relations: string[];
  functions: string[];
  /** Tables in an order rows can be deleted in (referencing tables first). */
  tables: string[];
  /** Rows the migrations inserted (JSON arrays), by table; schema_version is left alone. */
  seeded: Array<[string, string]>;
  sequences: string[];
}

/** The oids of a schema's relations, tables and functions. */
interface Oids {
  rels: number[];
  tables: number[];
  procs: number[];
}

const pools = new Map<string, string[]>();
const made = new Map<string, Set<string>>();
/** Per schema, when its catalog last matched a just-migrated one: its oids and stamp then. */
const stamps = new Map<string, { oids: Oids; stamp: string }>();
let shape: Promise<Shape> | undefined;

afterAll(async () => {
  for (const [url, names] of made) await dropSchemas(url, [...names]);
  made.clear();
  pools.clear();
});

/** Drops `schemas` on one connection, many per statement (one DROP of 240 schemas a file
 *  left took over a minute one by one); a batch that fails is dropped one by one. */
async function dropSchemas(url: string, schemas: string[]): Promise<void> {
  if (schemas.length === 0) return;
  const BATCH = 16;
  const failed: string[] = [];
  await withClient(url, async (c) => {
    for (let i = 0; i < schemas.length; i += BATCH) {
      const batch = schemas.slice(i, i + BATCH);
      await c
        .query(`DROP SCHEMA IF EXISTS ${batch.map((s) => `"${s}"`).join(", ")} CASCADE`)
        .catch(() => failed.push(...batch));
    }
  });
  for (const schema of failed) await dropSchema(url, schema);
}

/** An empty migrated schema for one test: one the file used before, emptied, or a new name
 *  (created and migrated by the first store that opens it). Synchronous, so it can stand
 *  wherever a fresh schema name is chosen. */
export function reusableSchema(url: string, prefix = "cairn_reuse"): ReusableSchema {
  const free = pools.get(url) ?? [];
  pools.set(url, free);
  const schema = free.pop() ?? `${prefix}_${randomBytes(6).toString("hex")}`;
  const names = made.get(url) ?? new Set<string>();
  made.set(url, names);
  names.add(schema);
  let released = false;
  return {
    schema,
    url: tagged(url, schema),
    release: async () => {
      if (released) return;
      released = true;
      if (await emptied(url, schema).catch(() => false)) free.push(schema);
      else {
        names.delete(schema);
        stamps.delete(schema);
        await dropSchema(url, schema);
      }
    },
  };
}

function tagged(url: string, schema: string): string {
  const u = new URL(url);
  u.searchParams.set("application_name", schema);
  return u.toString();
}

/** Empties `schema` to its just-migrated state; false when it must not be reused (or does
 *  not exist: no store opened it). */
async function emptied(url: string, schema: string): Promise<boolean> {
  const want = await shapeOf(url);
  return withClient(url, async (c) => {
    const exists = await c.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
    if (exists.rowCount === 0) return false;
    const open = await c.query<{ n: string }>(
      "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
      [schema],
    );
    if (Number(open.rows[0]?.n) > 0) return false;
    // The whole catalog is compared the first time (a test's store migrated the schema);
    // after that, the row versions of its catalog entries tell whether anything changed.
    const known = stamps.get(schema);
    if (!known || (await stampOf(c, schema, known.oids)) !== known.stamp) {
      const oids = await oidsOf(c, schema, want);
      if ((await catalogOf(c, schema, oids)) !== want.catalog) return false;
      stamps.set(schema, { oids, stamp: await stampOf(c, schema, oids) });
    }
    const q = (name: string) => `"${schema}"."${name}"`;
    const statements = [
      "BEGIN",
      "SET LOCAL lock_timeout = '5s'",
      ...want.tables.map((t) => `DELETE FROM ${q(t)}`),
      ...want.seeded.map(
        ([t, rows]) =>
          `INSERT INTO ${q(t)} SELECT * FROM json_populate_recordset(NULL::${q(t)}, '${rows.replaceAll("'", "''")}')`,
      ),
      ...want.sequences.map((s) => `SELECT setval('${q(s)}', 1, false)`),
      "COMMIT",
    ];
    try {
      await c.query(statements.join(";\n"));
      return true;
    } catch {
      await c.query("ROLLBACK").catch(() => {});
      return false;
    }
  });
}

/** The oids of `schema`'s relations and functions named in `names` (all of them, when not
 *  given: a scan of the catalog, done once per run for the reference schema). */
async function oidsOf(c: pg.Client, schema: string, names?: Shape): Promise<Oids> {
  const r = await c.query<{ oid: number; kind: string }>(
    names
      ? `SELECT oid::int, relkind::text AS kind FROM pg_class
          WHERE relname = ANY($2::text[]) AND relnamespace = $1::regnamespace
         UNION ALL
         SELECT oid::int, 'f' FROM pg_proc
          WHERE proname = ANY($3::text[]) AND pronamespace = $1::regnamespace`
      : `SELECT oid::int, relkind::text AS kind FROM pg_class WHERE relnamespace = $1::regnamespace
         UNION ALL
         SELECT oid::int, 'f' FROM pg_proc WHERE pronamespace = $1::regnamespace`,
    names ? [schema, names.relations, names.functions] : [schema],
  );
  return {
    rels: r.rows.filter((x) => x.kind !== "f").map((x) => x.oid),
    tables: r.rows.filter((x) => x.kind === "r").map((x) => x.oid),
    procs: r.rows.filter((x) => x.kind === "f").map((x) => x.oid),
  };
}

/** The row versions (xmin) of the catalog rows of `oids` (relations, their columns, indexes
 *  and constraints, functions) and the schema's versions: DDL on any of them (or a
 *  migration row changed) changes it. */
async function stampOf(c: pg.Client, schema: string, oids: Oids): Promise<string> {
  const r = await c.query<{ stamp: string }>(
    `SELECT concat_ws('|',
       (SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid)
          FROM pg_class WHERE oid = ANY($1::oid[])),
       (SELECT string_agg(indexrelid::text || ':' || xmin::text, ',' ORDER BY indexrelid)
          FROM pg_index WHERE indrelid = ANY($2::oid[])),
       (SELECT string_agg(attrelid::text || '.' || attnum || ':' || xmin::text, ','
                          ORDER BY attrelid, attnum)
          FROM pg_attribute WHERE attrelid = ANY($2::oid[])),
       (SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid)
          FROM pg_constraint WHERE conrelid = ANY($2::oid[])),
       (SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid)
          FROM pg_proc WHERE oid = ANY($3::oid[])),
       (SELECT string_agg(version::text, ',' ORDER BY version) FROM "${schema}".schema_version)
     ) AS stamp`,
    [oids.rels, oids.tables, oids.procs],
  );
  return r.rows[0]?.stamp ?? "";
}

/** The definitions of `oids` (relations and their kinds, columns, indexes, constraints,
 *  functions) and the schema's versions, as one text with the schema's name left out:
 *  equal for two schemas the migrations made alike. */
async function catalogOf(c: pg.Client, schema: string, oids: Oids): Promise<string> {
  const r = await c.query<Record<string, string | null>>(
    `SELECT
       (SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname)
          FROM pg_class WHERE oid = ANY($1::oid[])) AS rels,
       (SELECT string_agg(c.relname || '.' || a.attname || ':' || format_type(a.atttypid, a.atttypmod)
                          || ':' || a.attnotnull::text, ',' ORDER BY c.relname, a.attnum)
          FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         WHERE a.attrelid = ANY($2::oid[]) AND a.attnum > 0 AND NOT a.attisdropped) AS cols,
       (SELECT string_agg(conname || ':' || pg_get_constraintdef(oid), ',' ORDER BY conname)
          FROM pg_constraint WHERE conrelid = ANY($2::oid[])) AS cons,
       (SELECT string_agg(x.relname || ':' || pg_get_indexdef(i.indexrelid), ',' ORDER BY x.relname)
          FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
         WHERE i.indrelid = ANY($2::oid[])) AS idx,
       (SELECT string_agg(proname || ':' || pg_get_functiondef(oid), ',' ORDER BY proname, oid)
          FROM pg_proc WHERE oid = ANY($3::oid[])) AS procs,
       (SELECT string_agg(version::text, ',' ORDER BY version)
          FROM "${schema}".schema_version) AS versions`,
    [oids.rels, oids.tables, oids.procs],
  );
  const row = r.rows[0] ?? {};
  const text = JSON.stringify([row.rels, row.cols, row.cons, row.idx, row.procs, row.versions]);
  // Function and index definitions name the schema: compare them without it.
  return text.replaceAll(schema, "<schema>");
}

/** The shape of a just-migrated schema: read from the run's shared directory, else learned
 *  by migrating one (which then joins the pool) and written there. */
function shapeOf(url: string): Promise<Shape> {
  const dir = process.env.CAIRN_PG_SHAPE_DIR;
  const file = dir && join(dir, `shape-${SCHEMA_VERSION}.json`);
  shape ??= (async () => {
    if (file) {
      try {
        return JSON.parse(readFileSync(file, "utf8")) as Shape;
      } catch {
        // Not learned yet in this run.
      }
    }
    const learned = await learnShape(url);
    if (file) {
      try {
        const tmp = `${file}.${process.pid}`;
        writeFileSync(tmp, JSON.stringify(learned));
        renameSync(tmp, file);
      } catch {
        // The directory is gone (the run is ending): only sharing is lost.
      }
    }
    return learned;
  })();
  return shape;
}

async function learnShape(url: string): Promise<Shape> {
  const fresh = reusableSchema(url);
  const store = postgresStore(fresh.url, { schema: fresh.schema, poolSize: 1 });
  await store.open({ clock: realClock });
  await store.close();
  const s = await withClient(url, async (c) => {
    const oids = await oidsOf(c, fresh.schema);
    const rels = await c.query<{ name: string; kind: string }>(
      "SELECT relname AS name, relkind::text AS kind FROM pg_class WHERE oid = ANY($1::oid[])",
      [oids.rels],
    );
    const procs = await c.query<{ name: string }>(
      "SELECT proname AS name FROM pg_proc WHERE oid = ANY($1::oid[])",
      [oids.procs],
    );
    const refs = await c.query<{ from: string; to: string }>(
      `SELECT f.relname AS from, t.relname AS to FROM pg_constraint k
         JOIN pg_class f ON f.oid = k.conrelid JOIN pg_class t ON t.oid = k.confrelid
        WHERE k.conrelid = ANY($1::oid[]) AND k.contype = 'f'`,
      [oids.tables],
    );
    const tables = rels.rows
      .filter((r) => r.kind === "r" && r.name !== "schema_version")
      .map((r) => r.name);
    const seeded: Array<[string, string]> = [];
    for (const t of tables) {
      const rows = await c.query<{ rows: string | null }>(
        `SELECT json_agg(t)::text AS rows FROM "${fresh.schema}"."${t}" t`,
      );
      const json = rows.rows[0]?.rows;
      if (json) seeded.push([t, json]);
    }
    const shape: Shape = {
      catalog: await catalogOf(c, fresh.schema, oids),
      relations: rels.rows.map((r) => r.name).sort(),
      functions: [...new Set(procs.rows.map((r) => r.name))].sort(),
      tables: deleteOrder(tables, refs.rows),
      seeded,
      sequences: rels.rows.filter((r) => r.kind === "S").map((r) => r.name),
    };
    stamps.set(fresh.schema, { oids, stamp: await stampOf(c, fresh.schema, oids) });
    return shape;
  });
  // The migrated schema is empty: the file's next test takes it.
  pools.get(url)?.push(fresh.schema);
  return s;
}

/** `tables` with every table that references another before it. */
function deleteOrder(tables: string[], edges: Array<{ from: string; to: string }>): string[] {
  const out: string[] = [];
  const left = new Set(tables);
  while (left.size > 0) {
    const next = [...left].filter(
      (t) => !edges.some((e) => e.to === t && e.from !== t && left.has(e.from)),
    );
    if (next.length === 0) throw new Error(`cyclic foreign keys among ${[...left].join(", ")}`);
    for (const t of next.sort()) {
      out.push(t);
      left.delete(t);
    }
  }
  return out;
}
