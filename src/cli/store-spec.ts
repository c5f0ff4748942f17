// Which store a command uses: `--store <spec>`, else $CAIRN_STORE, else the default file.
// A spec is `sqlite:<path>`, a bare path (SQLite), or a postgres:// / postgresql:// URL.
// Client commands refuse a SQLite file that does not exist yet: creating an empty store
// because the command ran in the wrong directory would only hide the mistake.

import {
  type ApprovalKey,
  createEngine,
  EncryptedValue,
  type Engine,
  PayloadKeyError,
  type RunView,
  type Store,
} from "../index.js";
import {
  openStoreSpec,
  parseStoreSpec as parseSelection,
  type StoreSpec,
  withEnvironmentKeys,
} from "../store/select.js";
import { type CliContext, CliError, UsageError } from "./command.js";

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

/** The run after a command acted on it (cancel, resume, send), for what is printed. The
 *  action is done: a payload under a key this process was not given must not turn it into
 *  a reported failure (the user would do it again: a second event). The run then comes as a
 *  listing shows it, such payloads as [encrypted with key "id"]. */
export async function runAfter(engine: Engine, id: string): Promise<RunView | undefined> {
  try {
    return await engine.getRun(id);
  } catch (err) {
    if (!(err instanceof PayloadKeyError)) throw err;
  }
  let before: { createdAt: number; id: string } | undefined;
  for (;;) {
    const page = await engine.listRuns({ idContains: id, limit: 200, ...(before && { before }) });
    const run = page.find((r) => r.id === id);
    const last = page[page.length - 1];
    if (run || page.length < 200 || !last) return run;
    before = { createdAt: last.createdAt.getTime(), id: last.id };
  }
}

/** Refuses to store `what` for run `id` in plain text: without $CAIRN_ENCRYPTION_KEYS this
 *  process writes plain text, and a run whose payloads are encrypted would keep it so (its
 *  store encrypts everything else), with nothing said. Nothing is written when refused. */
export async function refusePlainTextInto(
  engine: Engine,
  id: string,
  env: NodeJS.ProcessEnv,
  what: string,
): Promise<void> {
  if (env.CAIRN_ENCRYPTION_KEYS?.trim()) return;
  const run = await engine.getRun(id);
  if (run === undefined) return;
  // The input alone does not tell: a run started by a client with no keys (cairn start) has
  // a plain input, and every record its workers wrote after it encrypted (steps, events,
  // approval requests). Those are read only when the input is plain, the journal last.
  const isEncrypted = (v: unknown): v is EncryptedValue => v instanceof EncryptedValue;
  const encrypted =
    [run.input, run.output].find(isEncrypted) ??
    (await engine.listEvents(id)).map((e) => e.payload).find(isEncrypted) ??
    (await engine.listApprovals(id)).map((a) => a.request).find(isEncrypted) ??
    (await engine.getSteps(id)).map((s) => s.result).find(isEncrypted);
  if (encrypted === undefined) return;
  throw new CliError(
    `run ${JSON.stringify(id)} is encrypted (key "${encrypted.keyId}") and $CAIRN_ENCRYPTION_KEYS is not set: ${what} would be stored in plain text. Set CAIRN_ENCRYPTION_KEYS as the workers have it; nothing was written`,
  );
}
