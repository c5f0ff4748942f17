// Which store a command uses: `--store <spec>`, else $CAIRN_STORE, else the default file.
// A spec is `sqlite:<path>`, a bare path (SQLite), or a postgres:// / postgresql:// URL.
// Client commands refuse a SQLite file that does not exist yet: creating an empty store
// because the command ran in the wrong directory would only hide the mistake.

import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { createEngine, type Engine, type Store, sqliteStore } from "../index.js";
import { type CliContext, CliError, UsageError } from "./command.js";

export const DEFAULT_STORE_SPEC = "sqlite:.cairn/cairn.db";

export type StoreSpec =
  | { kind: "sqlite"; path: string }
  | { kind: "postgres"; url: string; schema: string | undefined };

export function parseStoreSpec(
  values: { store?: string | undefined; schema?: string | undefined },
  ctx: CliContext,
): StoreSpec {
  const fromFlag = values.store !== undefined;
  const spec = values.store ?? (ctx.env.CAIRN_STORE || DEFAULT_STORE_SPEC);
  const where = fromFlag ? "--store" : "CAIRN_STORE";
  if (/^postgres(ql)?:\/\//i.test(spec)) {
    return {
      kind: "postgres",
      url: spec,
      schema: values.schema ?? (ctx.env.CAIRN_PG_SCHEMA || undefined),
    };
  }
  if (values.schema !== undefined) {
    throw new UsageError("--schema applies only to a PostgreSQL store (a postgres:// URL)");
  }
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(spec);
  if (scheme) {
    throw new UsageError(
      `${where}: unsupported store "${scheme[1]}://..."; use sqlite:<path>, a path, or a postgres:// URL`,
    );
  }
  const path = spec.startsWith("sqlite:") ? spec.slice("sqlite:".length) : spec;
  if (path.trim() === "")
    throw new UsageError(`${where}: "sqlite:" needs a path, e.g. sqlite:.cairn/cairn.db`);
  return { kind: "sqlite", path: path === ":memory:" ? path : resolve(ctx.cwd, path) };
}

export async function openStore(spec: StoreSpec, options: { mustExist: boolean }): Promise<Store> {
  if (spec.kind === "sqlite") {
    if (options.mustExist && spec.path !== ":memory:" && !existsSync(spec.path)) {
      throw new CliError(
        `No cairn store at "${spec.path}" (SQLite). Run the command where the store is, or ` +
          "pass --store / set CAIRN_STORE (sqlite:<path> or a postgres:// URL).",
      );
    }
    return sqliteStore(spec.path);
  }
  // Loaded only when used, so SQLite users never load the PostgreSQL driver.
  const { postgresStore } = await import("../store/postgres/postgres-store.js");
  return postgresStore(spec.url, spec.schema === undefined ? {} : { schema: spec.schema });
}

/** Runs `fn` with a client engine (it never executes runs) and closes it afterwards. */
export async function withClient<T>(
  values: { store?: string | undefined; schema?: string | undefined },
  ctx: CliContext,
  fn: (engine: Engine) => Promise<T>,
): Promise<T> {
  const store = await openStore(parseStoreSpec(values, ctx), { mustExist: true });
  const engine = createEngine({ store, worker: false });
  try {
    return await fn(engine);
  } finally {
    await engine.close();
  }
}
