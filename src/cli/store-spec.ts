// Which store a command uses: `--store <spec>`, else $CAIRN_STORE, else the default file.
// A spec is `sqlite:<path>`, a bare path (SQLite), or a postgres:// / postgresql:// URL.
// Client commands refuse a SQLite file that does not exist yet: creating an empty store
// because the command ran in the wrong directory would only hide the mistake.

import { type ApprovalKey, createEngine, type Engine, type Store } from "../index.js";
import {
  openStoreSpec,
  parseStoreSpec as parseSelection,
  type StoreSpec,
  withEnvironmentKeys,
} from "../store/select.js";
import { type CliContext, UsageError } from "./command.js";

export { DEFAULT_STORE_SPEC, type StoreSpec } from "../store/select.js";

/** --store / --schema, else CAIRN_STORE / CAIRN_PG_SCHEMA (selectStore's rules); a spec
 *  that cannot be a store is a usage error. */
export function parseStoreSpec(
  values: { store?: string | undefined; schema?: string | undefined },
  ctx: CliContext,
): StoreSpec {
  try {
    return parseSelection({
      store: values.store,
      schema: values.schema,
      env: ctx.env,
      cwd: ctx.cwd,
    });
  } catch (err) {
    if (!(err instanceof TypeError)) throw err;
    // The selection names its options "store" and "schema"; here they are flags.
    throw new UsageError(err.message.replace(/^(store|schema)\b/, "--$1"));
  }
}

/** The store of `spec`, through encryptedStore when $CAIRN_ENCRYPTION_KEYS holds keys. */
export async function openStore(
  spec: StoreSpec,
  options: { mustExist: boolean; env: NodeJS.ProcessEnv },
): Promise<Store> {
  const store = await openStoreSpec(spec, { mustExist: options.mustExist });
  try {
    return withEnvironmentKeys(store, options.env);
  } catch (err) {
    await store.close().catch(() => {});
    throw new UsageError((err as Error).message);
  }
}

/** Runs `fn` with a client engine (it never executes runs) and closes it afterwards. The
 *  engine refuses a malformed argument (a run id, a workflow name, a budget, an approver)
 *  with a TypeError naming it: here that is the command line's mistake, a usage error. */
export async function withClient<T>(
  values: { store?: string | undefined; schema?: string | undefined },
  ctx: CliContext,
  fn: (engine: Engine) => Promise<T>,
  options: { approvalKeys?: ApprovalKey[] } = {},
): Promise<T> {
  const store = await openStore(parseStoreSpec(values, ctx), { mustExist: true, env: ctx.env });
  const engine = createEngine({ store, worker: false, ...options });
  try {
    return await fn(engine);
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, { cause: err });
    throw err;
  } finally {
    await engine.close();
  }
}

/** Resolves once `engine` has opened its store. The engine opens it lazily, so without a
 *  first read a store that cannot be opened would surface only later, or never. */
export async function ensureOpened(engine: Engine): Promise<void> {
  try {
    await engine.listRuns({ limit: 1 });
  } catch (err) {
    await engine.close();
    throw err;
  }
}
