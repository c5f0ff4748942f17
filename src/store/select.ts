// How cairn picks a store from configuration: an explicit spec, else $CAIRN_STORE, else
// the default SQLite file; for PostgreSQL the schema, else $CAIRN_PG_SCHEMA, else "cairn".
// The CLI uses exactly this, and it is public (selectStore) so that a user's starter, a
// test and `cairn worker` reach the same store the same way. This is the one place outside
// cli/ that reads the environment, and only the env it is handed (process.env by default).

import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { parseEncryptionKeys } from "../codec/encryption.js";
import { StoreError } from "../errors.js";
import { encryptedStore } from "./encrypted-store.js";
import { schemaNameProblem } from "./postgres/sql.js";
import { sqliteStore } from "./sqlite/sqlite-store.js";
import type { Store } from "./store.js";

export const DEFAULT_STORE_SPEC = "sqlite:.cairn/cairn.db";

export type StoreSpec =
  | { kind: "sqlite"; path: string }
  | { kind: "postgres"; url: string; schema: string | undefined };

export interface StoreSelection {
  /** `sqlite:<path>`, a bare path (SQLite), or a `postgres://` / `postgresql://` URL.
   *  Default: `env.CAIRN_STORE`, else `sqlite:.cairn/cairn.db`. */
  store?: string | undefined;
  /** PostgreSQL schema. Default: `env.CAIRN_PG_SCHEMA`, else "cairn". Refused for SQLite. */
  schema?: string | undefined;
  /** Where CAIRN_STORE and CAIRN_PG_SCHEMA are read. Default: process.env. */
  env?: Readonly<Record<string, string | undefined>>;
  /** What a relative SQLite path is relative to. Default: process.cwd(). */
  cwd?: string;
  /** Refuse a SQLite file that does not exist yet or holds no cairn store (empty, or another
   *  application's database), or a PostgreSQL schema without cairn's
   *  tables (a client in the wrong directory, or given a mistyped schema, would otherwise
   *  create an empty store and see no runs). Default false. */
  mustExist?: boolean;
}

/** Reads a selection into a spec; a spec that cannot be a store is a TypeError naming
 *  where it came from (the option or CAIRN_STORE). */
export function parseStoreSpec(selection: StoreSelection = {}): StoreSpec {
  const env = selection.env ?? process.env;
  const fromOption = selection.store !== undefined;
  const spec = selection.store ?? (env.CAIRN_STORE || DEFAULT_STORE_SPEC);
  const where = fromOption ? "store" : "CAIRN_STORE";
  if (/^postgres(ql)?:\/\//i.test(spec)) {
    const schema = selection.schema ?? (env.CAIRN_PG_SCHEMA || undefined);
    const problem = schema === undefined ? undefined : schemaNameProblem(schema);
    if (problem !== undefined) {
      throw new TypeError(
        `${selection.schema !== undefined ? "schema" : "CAIRN_PG_SCHEMA"}: ${problem}`,
      );
    }
    return { kind: "postgres", url: spec, schema };
  }
  if (selection.schema !== undefined) {
    throw new TypeError("schema applies only to a PostgreSQL store (a postgres:// URL)");
  }
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(spec);
  if (scheme) {
    throw new TypeError(
      `${where}: unsupported store "${scheme[1]}://..."; use sqlite:<path>, a path, or a postgres:// URL`,
    );
  }
  const path = spec.startsWith("sqlite:") ? spec.slice("sqlite:".length) : spec;
  if (path.trim() === "") {
    throw new TypeError(`${where}: "sqlite:" needs a path, e.g. sqlite:.cairn/cairn.db`);
  }
  return {
    kind: "sqlite",
    path: path === ":memory:" ? path : resolve(selection.cwd ?? process.cwd(), path),
  };
}

/** Opens the store a spec names. PostgreSQL loads `pg` only now (an optional peer). */
export async function openStoreSpec(spec: StoreSpec, options: { mustExist?: boolean } = {}) {
  if (spec.kind === "sqlite") {
    if (options.mustExist && spec.path !== ":memory:" && !existsSync(spec.path)) {
      throw new StoreError(
        `No cairn store at "${spec.path}" (SQLite). Run where the store is (a worker creates it), or ` +
          "pass --store / set CAIRN_STORE (sqlite:<path> or a postgres:// URL).",
      );
    }
    return sqliteStore(spec.path, options.mustExist ? { mustExist: true } : undefined);
  }
  let postgres: typeof import("../postgres.js");
  try {
    postgres = await import("../postgres.js");
  } catch (err) {
    if (
      (err as NodeJS.ErrnoException).code === "ERR_MODULE_NOT_FOUND" &&
      /'pg'/.test(String(err))
    ) {
      throw new StoreError(
        'A postgres:// store needs the PostgreSQL driver: install it next to cairn with "npm install pg".',
        { cause: err },
      );
    }
    throw err;
  }
  return postgres.postgresStore(spec.url, {
    ...(spec.schema === undefined ? {} : { schema: spec.schema }),
    ...(options.mustExist ? { mustExist: true } : {}),
  });
}

/**
 * The store configuration selects, the same way the `cairn` CLI selects it:
 * `selectStore()` reads CAIRN_STORE and CAIRN_PG_SCHEMA (and CAIRN_ENCRYPTION_KEYS, like the
 * CLI); `selectStore({ store, schema })` takes them explicitly. Nothing is opened or created until the store is first used.
 */
export async function selectStore(selection: StoreSelection = {}): Promise<Store> {
  const store = await openStoreSpec(parseStoreSpec(selection), {
    mustExist: selection.mustExist ?? false,
  });
  return withEnvironmentKeys(store, selection.env ?? process.env);
}

/** `store` through encryptedStore when `env.CAIRN_ENCRYPTION_KEYS` holds keys
 *  ("id=base64,..."; the first encrypts): a starter, a worker and the CLI given the same
 *  environment read and write the same way. A malformed value is a TypeError. */
export function withEnvironmentKeys(
  store: Store,
  env: Readonly<Record<string, string | undefined>>,
): Store {
  const text = env.CAIRN_ENCRYPTION_KEYS;
  if (!text?.trim()) return store;
  try {
    return encryptedStore(store, { keys: parseEncryptionKeys(text) });
  } catch (err) {
    throw new TypeError(`CAIRN_ENCRYPTION_KEYS: ${(err as Error).message}`);
  }
}
