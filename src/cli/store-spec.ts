// Which store a command uses: `--store <spec>`, else $CAIRN_STORE, else the default file.
// A spec is `sqlite:<path>`, a bare path (SQLite), or a postgres:// / postgresql:// URL.
// Client commands refuse a SQLite file that does not exist yet: creating an empty store
// because the command ran in the wrong directory would only hide the mistake.

import {
  markedEncryptedStore,
  unreadablePayloadOf,
  unreadableRecentPayload,
} from "../engine/unreadable-payloads.js";
import { EncryptionKeyMissingError } from "../errors.js";
import { type ApprovalKey, createEngine, type Engine, type Store } from "../index.js";
import {
  openStoreSpec,
  parseStoreSpec as parseSelection,
  type StoreSpec,
  withEnvironmentKeys,
} from "../store/select.js";
import { type CliContext, CliError, UsageError } from "./command.js";

export { runAfter } from "../engine/run-after.js";
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
  options: { approvalKeys?: ApprovalKey[]; refused?: string } = {},
): Promise<T> {
  const { refused = "nothing was written", ...engineOptions } = options;
  const store = await openStore(parseStoreSpec(values, ctx), { mustExist: true, env: ctx.env });
  const engine = createEngine({ store, worker: false, ...engineOptions });
  try {
    return await fn(engine);
  } catch (err) {
    if (err instanceof EncryptionKeyMissingError) {
      throw markedStoreRefusal(err.store, err.what, refused, err);
    }
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
  const encrypted = await unreadablePayloadOf(engine, id);
  // Nothing in the run tells (its newest records may not be encrypted yet): the store may.
  if (encrypted === undefined) return refuseMarkedStore(engine, what, "nothing was written");
  throw new CliError(
    `run ${JSON.stringify(id)} is encrypted (key "${encrypted.keyId}") and $CAIRN_ENCRYPTION_KEYS is not set: ${what} would be stored in plain text. Set CAIRN_ENCRYPTION_KEYS as the workers have it; nothing was written`,
  );
}

/** As refusePlainTextInto, for a new run's input: refused when the store's newest runs are
 *  encrypted (its workers encrypt) and this process has no keys. */
export async function refusePlainTextStart(engine: Engine, env: NodeJS.ProcessEnv): Promise<void> {
  if (env.CAIRN_ENCRYPTION_KEYS?.trim()) return;
  const found = await unreadableRecentPayload(engine, { forStart: true });
  if (found === undefined) return refuseMarkedStore(engine, "the input", "nothing was started");
  throw new CliError(
    `this store is encrypted (run ${JSON.stringify(found.runId)} is, with key "${found.value.keyId}") and $CAIRN_ENCRYPTION_KEYS is not set: the input would be stored in plain text. Set CAIRN_ENCRYPTION_KEYS as the workers have it; nothing was started`,
  );
}

/** Refuses any payload when the store says it encrypts (an encrypted worker or server opened
 *  it): its runs may hold no ciphertext yet (none finished), and still be encrypted. The
 *  store refuses the write itself too (store/plain-payloads.ts), but a store opened before
 *  another process marked it believes "not marked" for up to a second; this reads the mark
 *  now, once per command. */
async function refuseMarkedStore(engine: Engine, what: string, outcome: string): Promise<void> {
  const store = await markedEncryptedStore(engine);
  if (store === undefined) return;
  throw markedStoreRefusal(store, what, outcome);
}

/** The CLI's words for a store marked encrypted that a payload would be written into in
 *  plain text: said by refuseMarkedStore, and by withClient for the store's own refusal
 *  (EncryptionKeyMissingError: a write no door check above covers, such as a cancel's
 *  default reason). */
function markedStoreRefusal(
  store: string,
  what: string,
  outcome: string,
  cause?: EncryptionKeyMissingError,
): CliError {
  return new CliError(
    `the store ${JSON.stringify(store)} is marked encrypted (its workers encrypt what they write) and $CAIRN_ENCRYPTION_KEYS is not set: ${what} would be stored in plain text. Set CAIRN_ENCRYPTION_KEYS as the workers have it; ${outcome}`,
    cause && { cause },
  );
}
