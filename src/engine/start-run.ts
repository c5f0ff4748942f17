// Creating runs: engine.start() (from a workflow's code, or by name) and the children a
// workflow starts (ctx.child). A new run is pinned to one name@version, its input checked
// by the workflow's schema when this engine has the code, and stored under a cairn.start
// span. Starting an id again is idempotent only for the same workflow, input and parent.

import { copyAsStored, decode, encode, takeCopy } from "../codec/codec.js";
import { sameStoredValue } from "../codec/same-stored-value.js";
import {
  InputValidationError,
  RunConflictError,
  SerializationError,
  toErrorRecord,
  UnknownWorkflowError,
} from "../errors.js";
import { newId } from "../lib/ids.js";
import { asStoreFailure } from "../lib/store-failure.js";
import type { NewRun, RunRecord } from "../store/store.js";
import { type FoundChild, isDigestOfOlderErrors } from "../workflow/child-identity.js";
import { type AnyWorkflow, isWorkflowName, type Workflow } from "../workflow/define.js";
import { formatIssues } from "../workflow/schema-check.js";
import { workerLive } from "./dead-workers.js";
import type { StartOptions } from "./engine.js";
import { type EngineInternals, openNow, ready } from "./engine-internals.js";
import { type Execution, handBackRun } from "./execution.js";
import { claimToBe, FoldedStart } from "./folded-start.js";
import { withStartSpan } from "./tracing.js";
import { checkBudget, checkRunId } from "./validate.js";

/** What a new run is pinned to: a workflow's identity, and what this engine knows of it
 *  (its input schema and default budget) when it has it registered. */
export interface Target {
  name: string;
  version: string;
  wf?: Workflow<unknown, unknown>;
}

/** engine.start(): a run of `wfOrName` (see resolveTarget for a name). Not async while the
 *  engine is open and the workflow given: createRun's promise is the answer, with no
 *  wrapper around it (a hop through the promise hooks of every run). */
export function startRun(
  internals: EngineInternals,
  wfOrName: AnyWorkflow | string,
  input: unknown,
  options: StartOptions,
): Promise<{ run: RunRecord; created: boolean }> {
  if (!openNow(internals) || typeof wfOrName === "string") {
    return startRunWhenReady(internals, wfOrName, input, options);
  }
  try {
    const target = { name: wfOrName.name, version: wfOrName.version, wf: wfOrName };
    return createRun(internals, target, storedCopy(target, input), options, null);
  } catch (err) {
    return Promise.reject(err);
  }
}

async function startRunWhenReady(
  internals: EngineInternals,
  wfOrName: AnyWorkflow | string,
  input: unknown,
  options: StartOptions,
): Promise<{ run: RunRecord; created: boolean }> {
  await ready(internals);
  const target: Target =
    typeof wfOrName === "string"
      ? await resolveTarget(internals, wfOrName)
      : { name: wfOrName.name, version: wfOrName.version, wf: wfOrName };
  return createRun(internals, target, storedCopy(target, input), options, null);
}

/** What the input schema is handed: the input as it is stored. */
function storedCopy(target: Target, input: unknown): unknown {
  // The input schema checks the input as it is stored, what the run's function gets (a
  // Buffer as a Uint8Array), as a child's does (ctx.child hands over the codec's copy): the
  // same workflow's schema saw a Buffer when started here and a Uint8Array as a child.
  return target.wf?.options.input ? takeCopy(copyAsStored(input)) : input;
}

/** A child run's parent, and the digest of the input its call handed in (childInputDigest;
 *  undefined for an input the codec refuses). */
interface ChildOf {
  parentId: string;
  inputDigest: string | undefined;
}

/** ctx.child: the child run `childId` of run `parentId`, on the code the parent handed in,
 *  keeping `inputDigest` with it. Undefined when created now; else what the child found
 *  under its id was started as (an earlier execution of the call created it and crashed
 *  before recording so), told by `inputByName` too for a digest an older cairn took. */
export async function startChildRun(
  internals: EngineInternals,
  parentId: string,
  childId: string,
  wf: Workflow<unknown, unknown>,
  input: unknown,
  inputDigest: string | undefined,
  inputByName?: string,
): Promise<FoundChild | undefined> {
  const { run, created } = await createRun(
    internals,
    { name: wf.name, version: wf.version, wf },
    input,
    { id: childId },
    { parentId, inputDigest },
  );
  if (created) return undefined;
  return {
    workflow: run.workflow,
    version: run.version,
    sameInput: foundWithSameInput(run, wf, input, inputDigest, inputByName),
  };
}

/** Whether a found child was started with the input handed now: by the digest of the input
 *  as handed then, which the child keeps (through its input schema, on any version, as a
 *  recorded call's intent compares); a child created before cairn kept it, by its stored
 *  input where that can tell (sameInputAsHanded). */
function foundWithSameInput(
  run: RunRecord,
  wf: Workflow<unknown, unknown>,
  input: unknown,
  inputDigest: string | undefined,
  inputByName: string | undefined,
): boolean | undefined {
  if (run.handedInputDigest == null) return sameInputAsHanded(run, wf, input);
  if (run.handedInputDigest === inputDigest) return true;
  // An unmarked digest (taken before cairn counted an Error's every part, or of an input
  // without an Error) and an input with an Error now (child-identity.ts): compared as it
  // was taken (by name, message and code), as a recorded intent's is, then told by the
  // stored input where that can say more. By the stored input alone, a child behind an
  // input schema or of another version was adopted whatever the input now was.
  if (isDigestOfOlderErrors(run.handedInputDigest, inputDigest)) {
    if (run.handedInputDigest !== inputByName) return false;
    return sameInputAsHanded(run, wf, input);
  }
  return false;
}

/** Whether a found child's stored input is `input` (as handed to ctx.child now), compared
 *  as stored values are (same-stored-value.ts: an Error without its stack, a view by the
 *  bytes it shows). Undefined when it cannot be told: a stored input this engine cannot
 *  read, or, on another version or through an input schema, what that code made of the
 *  input handed then. */
export function sameInputAsHanded(
  run: RunRecord,
  wf: Workflow<unknown, unknown>,
  input: unknown,
): boolean | undefined {
  if (run.version !== wf.version || wf.options.input) return undefined;
  let handed: string;
  try {
    decode(run.input);
    handed = encode(input, Number.POSITIVE_INFINITY);
  } catch {
    return undefined; // a stored input this engine cannot read (another key)
  }
  // A part view stored before only its bytes were is the same input as its bytes now.
  return sameStoredValue(handed, run.input);
}

/** Orders versions naturally: "2" < "10", "1.9" < "1.10", numbers before words. */
export function compareVersions(a: string, b: string): number {
  return a.localeCompare(b, "en", { numeric: true });
}

/** The workflow a run started by name belongs to: name@version as given, else the
 *  newest version registered here, else the newest a live worker serves. */
async function resolveTarget(internals: EngineInternals, ref: string): Promise<Target> {
  const { workflows } = internals.config;
  const at = ref.lastIndexOf("@");
  const named = at > 0 ? [ref.slice(0, at), ref.slice(at + 1)] : [ref];
  if (!named.every(isWorkflowName)) {
    // A run pinned to a name no workflow can have would never be executed.
    throw new TypeError(
      `start(): ${JSON.stringify(ref.slice(0, 300))} is not a workflow name or name@version; names and versions are 1-128 letters, digits and . _ : / - (not starting with a symbol)`,
    );
  }
  if (at > 0) {
    const name = ref.slice(0, at);
    const version = ref.slice(at + 1);
    const wf = workflows.get(`${name}@${version}`);
    return wf ? { name, version, wf } : { name, version };
  }
  const mine = [...workflows.values()].filter((w) => w.name === ref);
  if (mine.length > 0) {
    const wf = mine.sort((a, b) => compareVersions(b.version, a.version))[0]!;
    return { name: wf.name, version: wf.version, wf };
  }
  return { name: ref, version: await newestServedVersion(internals, ref) };
}

/** The newest version of workflow `name` that a live worker serves. */
async function newestServedVersion(internals: EngineInternals, name: string): Promise<string> {
  const { store, leaseMs } = internals.config;
  const now = await store.now();
  const served = new Set<string>();
  for (const w of await store.listWorkers()) {
    if (!workerLive(w, now, leaseMs)) continue;
    for (const id of w.workflows)
      if (id.startsWith(`${name}@`)) served.add(id.slice(name.length + 1));
  }
  const newest = [...served].sort(compareVersions).at(-1);
  if (newest === undefined) {
    throw new UnknownWorkflowError(
      `No workflow named "${name}" is registered with this engine or served by a live worker, so its version is unknown; start a worker for it, or start "${name}@<version>".`,
    );
  }
  return newest;
}

/** Stores a new run of `target` (or finds the one `options.id` already names, if it is the
 *  same run), and asks for a claim round when it is new. */
async function createRun(
  internals: EngineInternals,
  target: Target,
  input: unknown,
  options: StartOptions,
  child: ChildOf | null,
): Promise<{ run: RunRecord; created: boolean }> {
  const parentId = child?.parentId ?? null;
  // An id of its own (newId: a prefix and base64url) needs no check: only one given does.
  const id = options.id ?? newId("run");
  if (options.id !== undefined) checkRunId(id, "start()");
  // Checked by the input schema when this engine has one (it may be asynchronous), else
  // encoded at once: an await per start is a hop through the promise hooks.
  // A refused input names the run only when the caller gave its id: an id made here names
  // a run that never existed, and the caller never saw it.
  const named = options.id === undefined ? "" : ` (run "${id}")`;
  const encoded = target.wf?.options.input
    ? await checkedInput(internals, target, named, input)
    : encodedInput(internals, target, named, input);
  const budgetLimit = { ...(target.wf?.options.budget ?? {}), ...(options.budget ?? {}) };
  checkBudget(budgetLimit, "start()");
  const { config, worker, workerId } = internals;
  // This engine's own worker serves the workflow and has a free slot: create the run
  // claimed by it (one transaction) and execute it at once, with no claim round.
  const claimBy =
    worker && target.wf && config.workflows.get(`${target.name}@${target.version}`) === target.wf
      ? worker.reserveSlot()
        ? { workerId, leaseMs: config.leaseMs }
        : undefined
      : undefined;
  // Taken before asking: the store set the lease after this moment.
  const askedAt = config.clock.now();
  // A run with a fresh id (no start again under an id taken, no child) is executed as its
  // create waits for the turn's commit, where the store can fold its release into it.
  const folds =
    claimBy !== undefined && options.id === undefined && child === null && worker !== undefined;
  let made: { run: RunRecord; created: boolean };
  try {
    made = await withStartSpan(
      { workflow: target.name, version: target.version, runId: id },
      (traceContext) => {
        const newRun = {
          id,
          workflow: target.name,
          version: target.version,
          input: encoded,
          budgetLimit,
          parentId,
          traceContext,
          ...(child?.inputDigest !== undefined && { handedInputDigest: child.inputDigest }),
          ...(claimBy && { claimBy }),
        };
        if (folds && claimBy && config.store.createReleasedRun) {
          return createExecuted(internals, { ...newRun, claimBy }, askedAt);
        }
        return config.store.createRun(newRun);
      },
    );
    if (folds && config.store.createReleasedRun) return made;
  } catch (err) {
    // A run executed as its create waited (createExecuted) had its slot freed and its
    // create read back there: freed again here, the worker ran above its concurrency.
    if (claimBy && !(folds && config.store.createReleasedRun)) {
      worker?.releaseSlot();
      disownIfClaimed(internals, id);
    }
    // Whatever its type, a failure of the store (not a refusal of the input: ctx.child).
    throw asStoreFailure(err);
  }
  const { run, created } = made;
  if (claimBy) {
    // Executed here only while this worker still holds it: a create whose commit's answer
    // was lost is read back by its token as created, even when its lease ended before the
    // retry and another worker claimed the run meanwhile.
    const held = created && run.status === "running" && run.leaseOwner === workerId;
    if (held) worker?.adoptCreated({ run, recovered: false }, askedAt);
    else worker?.releaseSlot();
  }
  if (!created) checkSameRun(run, { id, target, encoded, parentId });
  if (created && !claimBy) worker?.requestClaimRound();
  return { run, created };
}

/** Creates a run claimed by this engine's worker while executing it (folded-start.ts):
 *  answers once it is durable, released already if its function ended needing no record. */
async function createExecuted(
  internals: EngineInternals,
  run: NewRun & { claimBy: NonNullable<NewRun["claimBy"]> },
  askedAt: number,
): Promise<{ run: RunRecord; created: boolean }> {
  const { config } = internals;
  const worker = internals.worker!;
  let ex: Execution | undefined;
  const create = config.store.createReleasedRun!.bind(config.store);
  const start = new FoldedStart(run, create, (made, folded) =>
    ex ? worker.createAnswered(ex, made, folded) : undefined,
  );
  ex = worker.executeBeforeCreate(claimToBe(run, askedAt), start, askedAt);
  let made: { run: RunRecord; created: boolean };
  try {
    made = await start.answer;
  } catch (err) {
    if (!start.folded) await start.durable(); // frees the slot, stops the execution
    if (!ex) worker.releaseSlot();
    disownIfClaimed(internals, run.id);
    throw asStoreFailure(err);
  }
  if (!ex) {
    // The worker closed before the execution began: the run is handed back as a create
    // claimed then would be.
    worker.releaseSlot();
    if (made.created) disownIfClaimed(internals, run.id);
  } else if (!start.folded) await start.durable(); // the worker tracks the run from now on
  if (!made.created) {
    const target = { name: run.workflow, version: run.version };
    checkSameRun(made.run, { id: run.id, target, encoded: run.input, parentId: null });
  }
  return made;
}

/** A create that failed may still have committed (the store's answer was lost): a run left
 *  leased to this worker, which never claims its own leases, is handed back to pending. */
function disownIfClaimed(internals: EngineInternals, id: string): void {
  const { config, worker, workerId } = internals;
  void (async () => {
    const run = await config.store.getRun(id);
    if (run?.status === "running" && run.leaseOwner === workerId && !worker?.active.has(id)) {
      if (await handBackRun(config.store, run)) worker?.requestClaimRound();
    }
  })().catch((err) => config.log(`run "${id}": reading back a failed create`, err));
}

/** The input as stored, checked (and transformed) by the workflow's input schema first:
 *  this engine has the workflow's code, with an input schema. */
async function checkedInput(
  internals: EngineInternals,
  target: Target,
  named: string,
  input: unknown,
): Promise<string> {
  const ref = `${target.name}@${target.version}`;
  const schema = target.wf!.options.input!;
  let res: Awaited<ReturnType<(typeof schema)["~standard"]["validate"]>>;
  try {
    res = await schema["~standard"].validate(input);
  } catch (err) {
    // A validator that throws (or rejects) refuses the input as an issue would: thrown
    // as it is from ctx.child, it was taken for a store failure, and the parent handed
    // back, claimed and refused again for ever.
    const e = toErrorRecord(err);
    throw new InputValidationError(
      `Input for workflow "${ref}"${named} could not be checked: its input schema threw ${e.name}: ${e.message}. Nothing was recorded.`,
      [],
      { cause: err },
    );
  }
  if (res.issues) {
    throw new InputValidationError(
      `Input for workflow "${ref}"${named} is invalid: ${formatIssues(res.issues)}. Nothing was recorded.`,
      res.issues,
    );
  }
  return encodedInput(internals, target, named, res.value);
}

/** The input (or what the input schema made of it) as stored: encoded within the payload
 *  limit. */
function encodedInput(
  internals: EngineInternals,
  target: Target,
  named: string,
  value: unknown,
): string {
  try {
    return encode(value, internals.config.maxPayloadBytes);
  } catch (err) {
    throw new SerializationError(
      `Input for workflow "${target.name}@${target.version}"${named} ${(err as Error).message}; nothing was recorded`,
      { cause: err },
    );
  }
}

/** A start that found its id taken returns that run only if it is the run asked for: same
 *  parent, same workflow, same input. Otherwise a RunConflictError says what differs. */
function checkSameRun(
  run: RunRecord,
  asked: { id: string; target: Target; encoded: string; parentId: string | null },
): void {
  const { id, target, encoded, parentId } = asked;
  if (parentId !== null && run.parentId !== parentId) {
    // Another parent's child, or a run started on its own: adopting it would hand this
    // parent someone else's result.
    const owner =
      run.parentId === null ? "a run started without a parent" : `a child of run "${run.parentId}"`;
    throw new RunConflictError(
      `Run "${parentId}" cannot start child run "${id}": that id is already taken by ${owner}. Rename the ctx.child call, or start the parent under an id that does not clash.`,
    );
  }
  // This parent's own child under this key, created by an earlier execution of the call
  // that crashed before recording it: the call judges whether it is still the same call
  // (startChildRun says what the child is; the parent fails with NonDeterminismError if not).
  if (parentId !== null) return;
  if (run.workflow !== target.name) {
    throw new RunConflictError(
      `Run id "${id}" already belongs to workflow "${run.workflow}"; it cannot be started as "${target.name}". Choose another id.`,
    );
  }
  if (!sameStoredValue(encoded, run.input)) {
    // Starting an id again returns the run it names, but only for the same input: a
    // different one would silently be ignored. The same input is the same value as stored
    // (same-stored-value.ts): an Error made at another call site, or a part view stored
    // before only its bytes were, is not another input.
    throw new RunConflictError(
      `Run "${id}" already exists with a different input; start is idempotent on the id only for the same input. Choose another id, or follow the existing run with engine.handle("${id}").`,
    );
  }
}
