// ctx.approval: a wait for the answer event of the call's key, with a stored request (the
// approvals row, idempotent) and a deadline whose outcome the workflow declared. It acts on
// the run only through CallCore (call-core.ts).

import { copyAsStored, decode, encode, type StoredCopy, takeCopy } from "../codec/codec.js";
import {
  InputValidationError,
  NonDeterminismError,
  SerializationError,
  toErrorRecord,
} from "../errors.js";
import { toMs } from "../lib/duration.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import type { ErrorRecord, PendingEvent } from "../store/store.js";
import { type ApprovalAnswer, answeredApproval, timedOutApproval } from "./approval-outcome.js";
import { approvalRequestDigests } from "./approval-request-digest.js";
import { type Call, type CallCore, HaltedSignal } from "./call-core.js";
import { unreadable } from "./call-errors.js";
import { type ChildCallIdentity, sameInputDigest } from "./child-identity.js";
import type { ContextHost } from "./context.js";
import type { ApprovalOptions, ApprovalResult } from "./context-types.js";
import { checkSchemaOrThrown } from "./schema-check.js";
import { lookedPastDeadline, waitDeadline } from "./wait-calls.js";

/** The event that answers approval `key` of a run (stored by the store's answerApproval). */
export const APPROVAL_EVENT_PREFIX = "cairn.approval:";

/** The keys of the approvals among the event names a run waits for (RunView.waitingFor),
 *  in their order. */
export function approvalKeys(names: readonly string[]): string[] {
  return names
    .filter((n) => n.startsWith(APPROVAL_EVENT_PREFIX))
    .map((n) => n.slice(APPROVAL_EVENT_PREFIX.length));
}

const APPROVAL_OPTIONS = ["request", "timeout", "onTimeout", "schema"];

export class ApprovalCalls {
  constructor(private readonly core: CallCore) {}

  /** ctx.approval: a wait for the answer event of this call's key, with a stored request
   *  (the approvals row, idempotent) and a timeout whose outcome the workflow declared. */
  approval<R, A>(name: string, options: ApprovalOptions<R, A>): Promise<ApprovalResult<A>> {
    const what = `ctx.approval("${name}")`;
    let onTimeout: "approve" | "reject";
    let timeoutMs: number | undefined;
    try {
      if (!options || typeof options !== "object" || !("request" in options)) {
        throw new TypeError(`${what} in run "${this.core.host.runId}": options need a request`);
      }
      const unknown = unknownOptionNames(options, APPROVAL_OPTIONS);
      if (unknown.length > 0) {
        throw new TypeError(
          `${what} in run "${this.core.host.runId}": ${unknownOptionsText(unknown, APPROVAL_OPTIONS)}`,
        );
      }
      onTimeout = options.onTimeout ?? "reject";
      if (onTimeout !== "approve" && onTimeout !== "reject") {
        throw new TypeError(`${what}: onTimeout must be "approve" or "reject"`);
      }
      timeoutMs =
        options.timeout === undefined ? undefined : toMs(options.timeout, `${what} timeout`);
    } catch (err) {
      return Promise.reject(err);
    }
    let request: StoredCopy = { value: options.request };
    // Taken when the call is made: the workflow may change the request object afterwards.
    const asked = approvalRequestDigests(options.request);
    return this.core.makeCall(
      name,
      "approval",
      (call) => this.approvalCall<R, A>(call, name, options, request, asked, onTimeout, timeoutMs),
      (call) => {
        this.matchAsking(call, name, asked);
        // An asking that may be stored (anew after a crash, or asked again by a resume): its
        // request as it is now (copyAsStored).
        if (!call.record) request = copyAsStored(options.request, this.core.storedTexts);
      },
    );
  }

  private async approvalCall<R, A>(
    call: Call,
    name: string,
    options: ApprovalOptions<R, A>,
    /** options.request as it was when the call was made. */
    given: StoredCopy,
    asked: Pick<ChildCallIdentity, "input">,
    onTimeout: "approve" | "reject",
    timeoutMs: number | undefined,
  ): Promise<ApprovalResult<A>> {
    await this.core.beforeExecute(call);
    const eventName = `${APPROVAL_EVENT_PREFIX}${call.key}`;
    const intent = this.core.journal.intents.get(call.key);
    const startedAt = intent?.createdAt ?? this.core.host.clock.now();
    // A copy of its own: what the schema does with it in place reaches no other call.
    let request: unknown = takeCopy(given);
    if (intent && options.schema?.request) {
      // Asked before: its approvals row may not be stored yet (a crash between the intent
      // and the row), and it holds the request as the schema makes it (a default filled in,
      // a secret redacted), as the first execution would have stored it. Stored raw, the
      // approver was shown another request than the code asks. That asking passed its
      // schema: one that fails now (changed since) changes nothing of the asking.
      const checked = await this.core.active0(checkSchemaOrThrown(options.schema.request, request));
      if (!("thrown" in checked) && checked.ok) request = checked.value;
    } else if (options.schema?.request) {
      const checked = await this.core.active0(checkSchemaOrThrown(options.schema.request, request));
      if ("thrown" in checked)
        return this.core.recordError(call, toErrorRecord(checked.thrown), startedAt);
      if (!checked.ok) {
        const err = new InputValidationError(
          `The request of approval "${call.key}" of run "${this.core.host.runId}" is invalid: ${checked.detail}. Nothing was asked.`,
          checked.issues,
        );
        return this.core.recordError(call, toErrorRecord(err), startedAt);
      }
      request = checked.value;
    }
    const encoded = this.encodeApprovalRequest(call, request);
    if (typeof encoded !== "string") return this.core.recordError(call, encoded, startedAt);
    const extra = {
      event: eventName,
      onTimeout,
      ...(asked.input !== undefined && { request: asked.input }),
    };
    const waited = waitDeadline(call, intent, startedAt, timeoutMs, extra);
    if (waited.fresh) await this.core.commit({ intents: [waited.fresh] });
    // A resume asks an asking its answer failed anew, with a deadline of its own from now
    // (the first one may be long past: the run would take onTimeout, asking nobody). The
    // store keeps the one the first execution of this asking wrote, and says which it is.
    const reopen = this.core.journal.replacedFailures.has(call.key);
    const anew = reopen && timeoutMs !== undefined;
    const askedAt = anew ? this.core.host.clock.now() : startedAt;
    // Idempotent: after a crash between the intent and this, the next execution asks again.
    const stored = await this.storeApproval({
      key: call.key,
      name,
      request: encoded,
      requestedAt: askedAt,
      deadline: anew ? askedAt + (timeoutMs as number) : waited.deadline,
      onTimeout,
      ...(reopen && { reopen: true }),
    });
    const deadline = reopen && stored ? stored.deadline : waited.deadline;
    const lastLook = { done: false };
    for (;;) {
      // As in waitForEvent: past the deadline, only an answer stored by then counts, and the
      // store accepts none at or after it.
      const taking = this.core.takeEvent(eventName, deadline);
      const ev: PendingEvent | undefined = taking instanceof Promise ? await taking : taking;
      if (ev) {
        const consume = [{ eventSeq: ev.seq, key: call.key }];
        const sent = decode<ApprovalAnswer>(await this.core.eventPayload(ev));
        let answer = sent.answer;
        if (answer !== undefined && options.schema?.answer) {
          const checked = await this.core.active0(
            checkSchemaOrThrown(options.schema.answer, answer),
          );
          if ("thrown" in checked) {
            return this.core.recordError(call, toErrorRecord(checked.thrown), startedAt, {
              consume,
            });
          }
          if (!checked.ok) {
            const err = new InputValidationError(
              `The answer to approval "${call.key}" of run "${this.core.host.runId}" (${sent.decision} by ${sent.by}) is invalid: ${checked.detail}. It must be answered again: a run this error fails asks anew once resumed (cairn resume ${JSON.stringify(this.core.host.runId)})`,
              checked.issues,
            );
            return this.core.recordError(call, toErrorRecord(err), startedAt, { consume });
          }
          answer = checked.value;
        }
        const result = answeredApproval<A>(sent, answer, ev.createdAt);
        return this.core.recordValue(call, result, startedAt, consume, { value: answer });
      }
      if (deadline !== null && this.core.host.clock.now() >= deadline) {
        // The store accepts answers until ITS clock reaches the deadline.
        if (await lookedPastDeadline(this.core, call.key, deadline, eventName, lastLook)) {
          return this.core.recordValue(call, timedOutApproval<A>(onTimeout, deadline), startedAt);
        }
        continue;
      }
      await this.core.block({ key: call.key, wakeAt: deadline, event: eventName });
    }
  }

  /** An asking with an intent was made by a call that asked a request: it must still be the
   *  same request, or the answer given to that one (stored with the approvals row the
   *  approver saw) would be handed to another: "deploy staging" approved, "drop production"
   *  performed. Compared by a digest of the request as handed in, as a child's input is
   *  (child-identity.ts; approval-request-digest.ts): the code's request before its schema,
   *  an Error by its every part but the stack. Intents written before cairn kept the digest
   *  hold none: not compared. */
  private matchAsking(call: Call, name: string, asked: Pick<ChildCallIdentity, "input">): void {
    const intent = this.core.journal.intents.get(call.key);
    if (!intent) return;
    let recorded: { request?: unknown };
    try {
      recorded = decode<{ request?: unknown }>(intent.data);
    } catch (err) {
      // An intent this worker cannot read: the call's own path stops on it (unlessKeyMissing).
      if (unreadable(err)) return;
      throw err;
    }
    if (typeof recorded.request !== "string" || sameInputDigest(recorded.request, asked)) return;
    const belongs = call.record ? "its recorded outcome belongs" : "an answer to it belongs";
    this.core.fail(
      new NonDeterminismError(
        `Run "${this.core.host.runId}" no longer matches its journal at key "${call.key}": the journal recorded approval "${name}" asked with another request than the code now asks (${belongs} to that request). Build the request from the workflow's input and recorded results only (ctx.now() for a time). ${this.core.remedy()}`,
        { runId: this.core.host.runId, key: call.key },
      ),
    );
    throw new HaltedSignal();
  }

  /** An approval's request as stored, or why it cannot be (the call's error). */
  private encodeApprovalRequest(call: Call, request: unknown): string | ErrorRecord {
    try {
      return encode(request, this.core.host.maxPayloadBytes);
    } catch (err) {
      const e = new SerializationError(
        `The request of approval "${call.key}" of run "${this.core.host.runId}" ${(err as Error).message}; nothing was asked`,
        { cause: err },
      );
      return toErrorRecord(e);
    }
  }

  private async storeApproval(
    p: Parameters<NonNullable<ContextHost["requestApproval"]>>[0],
  ): Promise<{ deadline: number | null } | undefined> {
    if (!this.core.host.requestApproval) return undefined;
    return this.core.active0(this.core.host.requestApproval(p));
  }
}
