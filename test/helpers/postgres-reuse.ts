// Migrated PostgreSQL schemas reused within one test file. Migrating a fresh schema (all of
// the store's migrations: tables, indexes, functions) costs the server 0.2-0.8 s, and most
// PostgreSQL tests only want empty storage; so a schema a test is done with is emptied
// (rows deleted, the rows the migrations seeded put back, sequences restarted: tens of
// milliseconds) and handed to the file's next test. A schema is reused only when that is
// safe, else dropped as before:
// - its catalog (tables, columns, indexes, functions, schema_version) is exactly what the
//   migrations make here (a test that altered or reverted its schema gets a fresh one);
// - no connection tagged with its name (application_name) is still open, so no store of the
//   previous test can write into the next test's rows.
// The pool's schemas are dropped after the file (afterAll, registered on import).

import { randomBytes } from "node:crypto";
import type pg from "pg";
import { afterAll } from "vitest";
import { realClock } from "../../src/lib/clock.js";
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

/** What a schema holds right after its migrations, learned once per file. */
interface Shape {
  catalog: string;
  /** Tables in an order rows can be deleted in (referencing tables first). */
  tables: string[];
  /** Rows the migrations inserted (JSON arrays), by table; schema_version is left alone. */
  seeded: Map<string, string>;
  sequences: string[];
}

const pools = new Map<string, string[]>();
const made = new Map<string, Set<string>>();
let shape: Promise<Shape> | undefined;

afterAll(async () => {
  for (const [url, names] of made) {
    for (const schema of names) await dropSchema(url, schema);
  }
  made.clear();
  pools.clear();
});

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
    if ((await catalogOf(c, schema)) !== want.catalog) return false;
    const q = (name: string) => `"${schema}"."${name}"`;
    const statements = [
      "BEGIN",
      "SET LOCAL lock_timeout = '5s'",
      ...want.tables.map((t) => `DELETE FROM ${q(t)}`),
      ...[...want.seeded].map(
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

/** Tables, columns, indexes, constraints, functions and schema versions of `schema`, as one
 *  text: equal for two schemas their migrations made alike ("" when there is no schema). */
async function catalogOf(c: pg.Client, schema: string): Promise<string> {
  const r = await c.query(
    `SELECT
       (SELECT string_agg(c.relname || ':' || c.relkind::text, ',' ORDER BY c.relname)
          FROM pg_class c WHERE c.relnamespace = n.oid) AS rels,
       (SELECT string_agg(c.relname || '.' || a.attname || ':' || format_type(a.atttypid, a.atttypmod)
                          || ':' || a.attnotnull::text, ',' ORDER BY c.relname, a.attnum)
          FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         WHERE c.relnamespace = n.oid AND a.attnum > 0 AND NOT a.attisdropped) AS cols,
       (SELECT string_agg(k.conname || ':' || pg_get_constraintdef(k.oid), ',' ORDER BY k.conname)
          FROM pg_constraint k WHERE k.connamespace = n.oid) AS cons,
       (SELECT string_agg(p.proname || ':' || pg_get_functiondef(p.oid), ',' ORDER BY p.proname, p.oid)
          FROM pg_proc p WHERE p.pronamespace = n.oid) AS procs,
       (SELECT string_agg(x.relname || ':' || pg_get_indexdef(i.indexrelid), ',' ORDER BY x.relname)
          FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid WHERE x.relnamespace = n.oid) AS idx
     FROM pg_namespace n WHERE n.nspname = $1`,
    [schema],
  );
  const row = r.rows[0] as Record<string, string | null> | undefined;
  if (!row) return "";
  // The versions the schema says it has: a test that deleted or added one changed it.
  const v = await c.query(
    `SELECT string_agg(version::text, ',' ORDER BY version) AS v FROM "${schema}".schema_version`,
  );
  const versions = (v.rows[0] as { v: string | null } | undefined)?.v ?? "";
  // Names inside function and index definitions carry the schema's own name: compare them
  // without it.
  const text = JSON.stringify([row.rels, row.cols, row.cons, row.procs, row.idx, versions]);
  return text.replaceAll(schema, "<schema>");
}

/** The shape of a schema just migrated here: migrates one for it (then pooled for use). */
function shapeOf(url: string): Promise<Shape> {
  shape ??= (async () => {
    const fresh = reusableSchema(url);
    const store = postgresStore(fresh.url, { schema: fresh.schema, poolSize: 1 });
    await store.open({ clock: realClock });
    await store.close();
    const s = await withClient(url, async (c) => {
      const tables = await c.query<{ name: string }>(
        "SELECT tablename AS name FROM pg_tables WHERE schemaname = $1 AND tablename <> 'schema_version'",
        [fresh.schema],
      );
      const refs = await c.query<{ from: string; to: string }>(
        `SELECT k.conrelid::regclass::text AS from, k.confrelid::regclass::text AS to
           FROM pg_constraint k WHERE k.connamespace = $1::regnamespace AND k.contype = 'f'`,
        [fresh.schema],
      );
      const seqs = await c.query<{ name: string }>(
        "SELECT sequencename AS name FROM pg_sequences WHERE schemaname = $1",
        [fresh.schema],
      );
      const names = tables.rows.map((t) => t.name);
      const bare = (qualified: string) => qualified.split(".").pop()?.replaceAll('"', "") ?? "";
      const edges = refs.rows.map((r) => ({ from: bare(r.from), to: bare(r.to) }));
      const seeded = new Map<string, string>();
      for (const t of names) {
        const rows = await c.query<{ rows: string | null }>(
          `SELECT json_agg(t)::text AS rows FROM "${fresh.schema}"."${t}" t`,
        );
        const json = rows.rows[0]?.rows;
        if (json) seeded.set(t, json);
      }
      return {
        catalog: await catalogOf(c, fresh.schema),
        tables: deleteOrder(names, edges),
        seeded,
        sequences: seqs.rows.map((r) => r.name),
      };
    });
    // The migrated schema is empty: the file's next test takes it.
    pools.get(url)?.push(fresh.schema);
    return s;
  })();
  return shape;
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
