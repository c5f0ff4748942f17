// ctx.child: starts a child run once (its id derived from the parent's and the call's key),
// records an intent naming it, and waits for the event its end sends. A call that finds a
// child it did not start (changed code) fails the run (child-identity.ts). It acts on the
// run only through CallCore (call-core.ts).

import { types } from "node:util";
import { copyAsStored, decode, encode, type StoredCopy, takeCopy } from "../codec/codec.js";
import {
  InputValidationError,
  NonDeterminismError,
  SerializationError,
  toErrorRecord,
} from "../errors.js";
import { childRunId } from "../lib/ids.js";
import { isStoreFailure } from "../lib/store-failure.js";
import { quoteGiven } from "../lib/text.js";
import type { ErrorRecord, PendingEvent } from "../store/store.js";
import { type Call, type CallCore, HaltedSignal, never } from "./call-core.js";
import { unreadable } from "./call-errors.js";
import {
  type ChildCallIdentity,
  type ChildIntent,
  childInputDigests,
  childMismatch,
  type FoundChild,
  foundChildMismatch,
} from "./child-identity.js";
import type { ChildOutcome } from "./context.js";
import { isWorkflowName, type Workflow } from "./define.js";
import type { JournalIndex } from "./journal-index.js";
import { intentRecord } from "./records.js";

/** The event that carries child run `id`'s outcome to its parent. */
export const CHILD_EVENT_PREFIX = "cairn.child:";

/** The result events of the children the journal holds begun and unfinished (an intent, no
 *  outcome): their calls, made again, take them (event-reads.ts reads them along with its
 *  first read). An intent that cannot be read is left to its call to judge. */
export function awaitedChildEvents(journal: JournalIndex): string[] {
  const names: string[] = [];
  for (const key of journal.unfinished) {
    const intent = journal.intents.get(key);
    if (intent?.kind !== "child") continue;
    try {
      const { childId } = decode<ChildIntent>(intent.data);
      if (typeof childId === "string") names.push(`${CHILD_EVENT_PREFIX}${childId}`);
    } catch {
      // judged by its call (matchChild)
    }
  }
  return names;
}

export class ChildCalls {
  constructor(private readonly core: CallCore) {}

  child<O>(name: string, wf: Workflow<unknown, unknown>, input: unknown): Promise<O> {
    const workflow = isWorkflowObject(wf) ? wf.name : undefined;
    let identity: ChildCallIdentity = { workflow, input: undefined };
    let handed: StoredCopy = { value: input };
    return this.core.makeCall(
      name,
      "child",
      (call) => this.childCall<O>(call, wf, handed, identity),
      // Taken when the call is made (match runs then): the workflow may change the input
      // object afterwards.
      (call) => {
        const starts = !call.record && !this.core.journal.intents.has(call.key);
        if (hasReads(input)) {
          // A getter or a proxy in the input: read once, by the copy. Read again for the
          // digest, a getter ran twice, and the child was handed its second answer under
          // the digest of its first. The digest is the copy's, on every execution alike.
          const copy = copyAsStored(input, this.core.storedTexts);
          if (starts) handed = copy;
          identity = { workflow, ...childInputDigests("text" in copy ? decode(copy.text) : input) };
        } else {
          identity = { workflow, ...childInputDigests(input) };
          // A call that will start its child: the input as it is now (copyAsStored).
          if (starts) handed = copyAsStored(input, this.core.storedTexts);
        }
        this.matchChild(call, identity);
      },
    );
  }

  /** A child call with an intent started a child: it must still be the call that started
   *  it, or the parent would be handed another child's result (child-identity.ts). */
  private matchChild(call: Call, identity: ChildCallIdentity): void {
    const intent = this.core.journal.intents.get(call.key);
    if (!intent) return;
    let recorded: ChildIntent;
    try {
      recorded = decode<ChildIntent>(intent.data);
    } catch (err) {
      // An intent this worker cannot read: the call's own path stops on it (unlessKeyMissing).
      if (unreadable(err)) return;
      throw err;
    }
    const why = childMismatch(recorded, identity);
    if (!why) return;
    // A recorded outcome: the child has ended, nothing of it is left to say.
    const left = call.record ? undefined : recorded.childId;
    this.core.fail(this.childNonDeterminism(call, why, left));
    throw new HaltedSignal();
  }

  /** The failure of a call that is not the one that started its child. The child, maybe
   *  unfinished (`leftChildId`), is left as it is, and the error says so: canceling it would
   *  take the result from the parent resumed on the code it started on (the first remedy),
   *  and a failed parent's children are not canceled with it. */
  private childNonDeterminism(call: Call, why: string, leftChildId?: string): NonDeterminismError {
    const left =
      leftChildId === undefined
        ? ""
        : ` Child run "${leftChildId}" is left as it is: resumed on the code it started on, this run takes its result; otherwise cancel the child if it is unfinished (engine.cancel("${leftChildId}")).`;
    return new NonDeterminismError(
      `Run "${this.core.host.runId}" no longer matches its journal at key "${call.key}": ${why}. ${this.core.remedy()}${left}`,
      { runId: this.core.host.runId, key: call.key },
    );
  }

  /** A child an earlier execution of this call created and never recorded (it crashed, or
   *  the run failed, before the intent) whose end has reached this run, and which is deleted
   *  since (retention, deleteRun): the call's outcome is that error, as for a recorded child.
   *  Created again, the child would run a second time, and the call would take the pending
   *  end of the deleted one, maybe started with another input, for the new child's.
   *  Undefined when no such end is pending, or the child is still there (compared as found).
   *  While this run executes, its children are not deleted (it is unfinished). */
  private async endedAndDeleted(
    childId: string,
  ): Promise<{ error: ErrorRecord; ended: PendingEvent | undefined } | undefined> {
    const eventName = `${CHILD_EVENT_PREFIX}${childId}`;
    const has = this.core.hasEvent(eventName);
    if (!(has instanceof Promise ? await has : has)) return undefined;
    const error = await this.core.active0(this.core.host.deletedChild(childId));
    if (!error) return undefined;
    const taking = this.core.takeEvent(eventName);
    return { error, ended: taking instanceof Promise ? await taking : taking };
  }

  private async childCall<O>(
    call: Call,
    wf: Workflow<unknown, unknown>,
    /** The input as it was when the call was made (copyAsStored). */
    input: StoredCopy,
    identity: ChildCallIdentity,
  ): Promise<O> {
    await this.core.beforeExecute(call);
    const intent = this.core.journal.intents.get(call.key);
    const startedAt = intent?.createdAt ?? this.core.host.clock.now();
    let childId: string;
    if (intent) {
      childId = decode<ChildIntent>(intent.data).childId;
    } else {
      // The child id is derived from (run, key), so starting it again after a crash is a
      // no-op: the child is created once.
      childId = childRunId(this.core.host.runId, call.key);
      const gone = await this.endedAndDeleted(childId);
      if (gone) {
        const consume = gone.ended && [{ eventSeq: gone.ended.seq, key: call.key }];
        return this.core.recordError<O>(call, gone.error, startedAt, { consume });
      }
      // Creating the child is the one write of a run that no epoch fences: a worker stopped
      // past its lease (SIGSTOP, a long pause) may wake after another worker took the run
      // over, and canceled or finished it; it must not start a child that then executes.
      if (this.core.host.leaseFresh && !this.core.host.leaseFresh()) {
        this.core.stopWithoutWriting();
        return never<O>();
      }
      const starting =
        isWorkflowObject(wf) && isWorkflowName(wf.name) && isWorkflowName(wf.version)
          ? // A copy of its own: what its schema does with it in place reaches no other call.
            this.core.host.startChild(
              childId,
              wf,
              takeCopy(input),
              identity.input,
              identity.inputByName,
            )
          : Promise.reject(notAWorkflow(call.name, this.core.host.runId, wf));
      // Until it has landed (or failed), the run is not released (halt): a finished parent
      // may be deleted, and a child created after that would be left behind.
      const landed = starting.then(
        () => {},
        () => {},
      );
      this.core.childStarts.add(landed);
      void landed.then(() => this.core.childStarts.delete(landed));
      // A child refused for its input (its schema, a value that cannot be stored, an invalid
      // id or workflow) is refused again on every execution: that is the call's outcome, recorded
      // (catchable, replayed), not a store failure to hand the run back for (it would be
      // claimed and refused again at once, for ever).
      let refusal: unknown;
      let found: FoundChild | undefined;
      await this.core.active0(
        starting.then(
          (f) => {
            found = f;
          },
          (err: unknown) => {
            if (!childRefusal(err)) throw err;
            refusal = err;
          },
        ),
      );
      if (refusal !== undefined) {
        return this.core.recordError<O>(call, toErrorRecord(refusal), startedAt);
      }
      // A child this call created before a crash took the worker (no intent recorded): it
      // must be the child the call starts now, as matchChild checks against an intent.
      const why = found && foundChildMismatch(found, identity);
      if (why) {
        this.core.fail(this.childNonDeterminism(call, why, childId));
        return never<O>();
      }
      const data: ChildIntent = { childId, workflow: identity.workflow };
      if (identity.input !== undefined) data.input = identity.input;
      await this.core.commit({ intents: [intentRecord(call, data, startedAt)] });
    }
    const eventName = `${CHILD_EVENT_PREFIX}${childId}`;
    let askedChild = false;
    for (;;) {
      const taking = this.core.takeEvent(eventName);
      let ev: PendingEvent | undefined = taking instanceof Promise ? await taking : taking;
      let res: ChildOutcome | undefined;
      if (!ev && !askedChild) {
        // The child may have finished while this run could not receive its event (it was
        // failed, and is being resumed): its current outcome is the answer.
        askedChild = true;
        res = await this.core.active0(this.core.host.childOutcome(childId));
        if (res) {
          // Its event lands with the child's end, so it may have come since this execution
          // read the run's events: consumed with this outcome, or a resume that executes
          // the call again would take it for the child's current outcome.
          await this.core.reloadEvents();
          const again = this.core.takeEvent(eventName);
          const found: PendingEvent | undefined = again instanceof Promise ? await again : again;
          ev = found;
        }
      }
      if (ev) res = childOutcomeOf(await this.core.eventPayload(ev));
      if (ev && res && "error" in res && res.error.code === "RUN_CANCELED") {
        // A child whose release met a requested cancel in the store sent its parent a reason
        // of its own; the cancel's reason is on the child's run, as a parent that reads it
        // there (resumed after the child ended) gets it.
        const stored = await this.core.active0(this.core.host.childOutcome(childId));
        if (stored && "error" in stored && stored.error.code === "RUN_CANCELED") res = stored;
      }
      if (res) {
        const consume = ev ? [{ eventSeq: ev.seq, key: call.key }] : undefined;
        if ("error" in res)
          return this.core.recordError<O>(call, res.error, startedAt, { consume });
        const output = res.output;
        return this.core.recordEncoded<O>(call, output, startedAt, consume);
      }
      await this.core.block({ key: call.key, wakeAt: null, event: eventName });
    }
  }
}

/** Whether `wf` is what workflow() makes (ctx.child's second argument). */
function isWorkflowObject(wf: unknown): wf is Workflow<unknown, unknown> {
  const w = wf as Partial<Workflow<unknown, unknown>> | null | undefined;
  return (
    typeof w?.name === "string" &&
    typeof w.version === "string" &&
    typeof w.fn === "function" &&
    typeof w.options === "object" &&
    w.options !== null
  );
}

/** The refusal of a ctx.child call given something else than a workflow. */
function notAWorkflow(name: string, runId: string, wf: unknown): TypeError {
  if (isWorkflowObject(wf)) {
    // Shaped like one, but named as workflow() never names one (NUL, a lone surrogate, a
    // megabyte): no store could keep the child exactly, and a failing create was taken
    // for the store's trouble, the parent handed back for ever.
    return new TypeError(
      `ctx.child(${JSON.stringify(name)}) in run "${runId}": the workflow handed in is named ${quoteGiven(wf.name)}, version ${quoteGiven(wf.version)}, which workflow() refuses (1-128 letters, digits and . _ : / -); pass a workflow made with workflow()`,
    );
  }
  const got = wf === null ? "null" : typeof wf === "function" ? "a function" : typeof wf;
  return new TypeError(
    `ctx.child(${JSON.stringify(name)}) in run "${runId}": the second argument must be a workflow made with workflow() (got ${got})`,
  );
}

/** A child's outcome as its result event carries it. */
function childOutcomeOf(payload: string): ChildOutcome {
  const sent = decode<{ output?: unknown; error?: ErrorRecord }>(payload);
  // The child's output, within the limit its release was held to: encoded again as it was
  // (not held to the codec's default limit, nor to this engine's), as the childOutcome path
  // records the child's stored output as it is.
  return sent.error
    ? { error: sent.error }
    : { output: encode(sent.output, Number.POSITIVE_INFINITY) };
}

/** A child run that cannot be created whatever the store says: its input is refused by
 *  its schema or cannot be stored, or its id or the workflow handed in is invalid. */
function childRefusal(err: unknown): boolean {
  // A TypeError thrown by the store is no refusal of the input: a third-party store over
  // HTTP meets a network failure as fetch's TypeError "fetch failed", a transient failure.
  if (err instanceof TypeError && isStoreFailure(err)) return false;
  return (
    err instanceof InputValidationError ||
    err instanceof SerializationError ||
    err instanceof TypeError
  );
}

/** Whether reading `value` may run code of the workflow's: an accessor property (a getter)
 *  or a proxy anywhere in it (own string keys, Map entries, Set members). Plain data, the
 *  common input, is walked once, as its digest walks it. */
function hasReads(value: unknown, seen = new Set<object>()): boolean {
  if (typeof value !== "object" || value === null) return false;
  if (seen.has(value)) return false;
  seen.add(value);
  if (types.isProxy(value)) return true;
  if (value instanceof Map) {
    for (const [k, v] of value) if (hasReads(k, seen) || hasReads(v, seen)) return true;
  } else if (value instanceof Set) {
    for (const v of value) if (hasReads(v, seen)) return true;
  }
  if (ArrayBuffer.isView(value)) return false;
  for (const key of Object.keys(value)) {
    const d = Object.getOwnPropertyDescriptor(value, key);
    if (!d) continue;
    if (d.get || d.set) return true;
    if (hasReads(d.value, seen)) return true;
  }
  return false;
}
