// What the API returns for what inspection holds: RunView, StepView, EventView and
// WorkerView as plain JSON (dates as ISO strings), and stored values (inputs, results,
// payloads) in a JSON form that never throws on what the codec can store — bigints, Maps,
// Sets, bytes, cycles, NaN — and never shows a value the codec could not decode.

import { type Withheld, withheldFields } from "../engine/views.js";
import type { AttemptView, EventView, RunView, StepView, WorkerView, Workflow } from "../index.js";
import { EncryptedValue, UndecodableValue } from "../index.js";

export const UNDECODABLE_TEXT = "[undecodable value]";

/**
 * A stored value as JSON: Dates as ISO strings, bigints as decimal strings, Maps as
 * objects (as [key, value] pairs when a key is not a string), Sets and typed arrays as
 * arrays, Errors as {name, message}, NaN and ±Infinity as strings, a value met again inside
 * itself as "[Circular]", an undecodable value as "[undecodable value]".
 *
 * Iterative, not recursive: a value nested as deep as the codec could store (a webhook's
 * payload of a few thousand nested arrays) must not overflow the stack here, where it
 * would be a 500 for the event just stored and for every later read of the run.
 */
export function toJsonValue(value: unknown, options: JsonValueOptions = {}): unknown {
  const ancestors = new Set<object>();
  const visit = (v: unknown, seen: Set<object>) => visitValue(v, seen, options);
  const first = visit(value, ancestors);
  if (!("frame" in first)) return first.value;
  const stack: Frame[] = [first.frame];
  ancestors.add(first.frame.source);
  for (;;) {
    const top = stack[stack.length - 1]!;
    if (top.next < top.children.length) {
      const [key, child] = top.children[top.next++]!;
      const seen = visit(child, ancestors);
      if ("frame" in seen) {
        top.pending = key;
        stack.push(seen.frame);
        ancestors.add(seen.frame.source);
      } else {
        setChild(top.out, key, seen.value);
      }
      continue;
    }
    stack.pop();
    ancestors.delete(top.source);
    const parent = stack[stack.length - 1];
    if (!parent) return top.out;
    setChild(parent.out, parent.pending, top.out);
  }
}

export interface JsonValueOptions {
  /** Called with each plain object (prototype Object or null) before its entries are
   *  converted: what it returns is converted in its place. The CLI adds a record's
   *  `withheld` field here, where the placeholders it names are still themselves. */
  record?: (value: Record<string, unknown>) => Record<string, unknown>;
}

/** A container being converted: its children, and the one being converted now. */
interface Frame {
  source: object;
  out: unknown[] | Record<string, unknown>;
  children: Array<[string | number, unknown]>;
  next: number;
  pending: string | number;
}

/** One value: its JSON form when it has no children, else the frame to fill. */
function visitValue(
  value: unknown,
  ancestors: Set<object>,
  options: JsonValueOptions,
): { value: unknown } | { frame: Frame } {
  switch (typeof value) {
    case "string":
    case "boolean":
      return { value };
    case "number":
      return { value: Number.isFinite(value) ? (Object.is(value, -0) ? 0 : value) : String(value) };
    case "bigint":
      return { value: value.toString() };
    case "undefined":
      return { value: null };
    case "object":
      break;
    default:
      return { value: String(value) };
  }
  if (value === null) return { value: null };
  if (value instanceof UndecodableValue) return { value: UNDECODABLE_TEXT };
  if (value instanceof EncryptedValue) return { value: value.toJSON() };
  if (value instanceof Date) {
    return { value: Number.isNaN(value.getTime()) ? null : value.toISOString() };
  }
  if (value instanceof RegExp) return { value: value.toString() };
  if (ancestors.has(value)) return { value: "[Circular]" };
  if (value instanceof Error) return { value: { name: value.name, message: value.message } };
  if (ArrayBuffer.isView(value)) {
    return {
      value: Array.from(value as unknown as ArrayLike<number | bigint>, (n) =>
        typeof n === "bigint" ? n.toString() : n,
      ),
    };
  }
  if (value instanceof ArrayBuffer) return { value: Array.from(new Uint8Array(value)) };
  const frame = (out: Frame["out"], children: Frame["children"]): { frame: Frame } => ({
    frame: { source: value, out, children, next: 0, pending: 0 },
  });
  // Every index, holes of a sparse array too (as null, as JSON.stringify writes them).
  const indexed = (items: unknown[]): Frame["children"] => Array.from(items, (v, i) => [i, v]);
  if (value instanceof Map) {
    const entries = [...value.entries()];
    if (entries.every(([k]) => typeof k === "string")) {
      return frame({}, entries as Array<[string, unknown]>);
    }
    // Each [key, value] pair is an array of its own, converted as one.
    return frame([], indexed(entries));
  }
  if (value instanceof Set) return frame([], indexed([...value]));
  if (Array.isArray(value)) return frame([], indexed(value));
  const proto = Object.getPrototypeOf(value);
  const { record } = options;
  const fields =
    record && (proto === Object.prototype || proto === null)
      ? record(value as Record<string, unknown>)
      : value;
  return frame(
    {},
    Object.entries(fields).filter(([, v]) => v !== undefined),
  );
}

function setChild(out: Frame["out"], key: string | number, value: unknown): void {
  (out as Record<string | number, unknown>)[key] = value;
}

const iso = (d: Date) => d.toISOString();

/** Sets `withheld: { field: why }` on `out` for each of `values` that is withheld: such a
 *  value's JSON is its placeholder text, which a user's string may hold too; the record's
 *  `withheld` field, which only cairn sets, tells them apart. */
function putWithheld(out: Record<string, unknown>, values: Record<string, unknown>): void {
  const withheld = withheldFields(values);
  if (withheld) out.withheld = { ...(out.withheld as object | undefined), ...withheld };
}

/** Sets `key` only when the value is defined: absent fields stay absent in JSON. */
function put<T extends object>(into: T, key: string, value: unknown): void {
  if (value !== undefined) (into as Record<string, unknown>)[key] = value;
}

/** A run without its input and output: what lists carry. */
export function runSummaryJson(run: RunView): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: run.id,
    workflow: run.workflow,
    version: run.version,
    status: run.status,
    budget: {
      limit: run.budget.limit,
      spent: run.budget.spent,
      ...(run.budget.defaultsUnknown && { defaultsUnknown: true }),
    },
    createdAt: iso(run.createdAt),
    updatedAt: iso(run.updatedAt),
  };
  put(out, "reason", run.reason);
  // Text (the reason) shown as a placeholder, as the view names it; runJson adds values.
  put(out, "withheld", run.withheld && { ...run.withheld });
  put(out, "pausedFor", run.pausedFor);
  put(out, "error", run.error && errorJson(run.error));
  put(out, "parentId", run.parentId);
  put(out, "wakeAt", run.wakeAt && iso(run.wakeAt));
  put(out, "waitingFor", run.waitingFor && [...run.waitingFor]);
  put(out, "cancelRequested", run.cancelRequested);
  put(out, "heldBy", run.heldBy);
  put(out, "heldUntil", run.heldUntil && iso(run.heldUntil));
  return out;
}

export function runJson(run: RunView): Record<string, unknown> {
  const out = runSummaryJson(run);
  put(out, "input", run.input === undefined ? undefined : toJsonValue(run.input));
  if (run.status === "completed") out.output = toJsonValue(run.output);
  putWithheld(out, {
    input: run.input,
    ...(run.status === "completed" ? { output: run.output } : {}),
  });
  return out;
}

function errorJson(e: {
  name: string;
  code?: string | undefined;
  message: string;
  stack?: string | undefined;
  withheld?: { message?: Withheld; stack?: Withheld } | undefined;
}): Record<string, unknown> {
  const out: Record<string, unknown> = { name: e.name, message: e.message };
  put(out, "code", e.code);
  put(out, "stack", e.stack);
  put(out, "withheld", e.withheld && { ...e.withheld });
  return out;
}

function attemptJson(a: AttemptView): Record<string, unknown> {
  const out: Record<string, unknown> = {
    attempt: a.attempt,
    startedAt: iso(a.startedAt),
    spend: a.spend,
  };
  put(out, "endedAt", a.endedAt && iso(a.endedAt));
  put(out, "error", a.error && errorJson(a.error));
  put(out, "retryAt", a.retryAt && iso(a.retryAt));
  return out;
}

export function stepJson(step: StepView): Record<string, unknown> {
  const out: Record<string, unknown> = {
    key: step.key,
    name: step.name,
    kind: step.kind,
    status: step.status,
    attempts: step.attempts.map(attemptJson),
    spend: step.spend,
    startedAt: iso(step.startedAt),
  };
  if (step.status === "completed") out.result = toJsonValue(step.result);
  put(out, "error", step.error && errorJson(step.error));
  put(out, "completedAt", step.completedAt && iso(step.completedAt));
  put(out, "intentAt", step.intentAt && iso(step.intentAt));
  if (step.status === "completed") putWithheld(out, { result: step.result });
  return out;
}

export function eventJson(e: EventView): Record<string, unknown> {
  const out: Record<string, unknown> = {
    seq: e.seq,
    name: e.name,
    payload: toJsonValue(e.payload),
    sentAt: iso(e.sentAt),
  };
  put(out, "consumedBy", e.consumedBy);
  put(out, "idempotencyKey", e.idempotencyKey);
  putWithheld(out, { payload: e.payload });
  return out;
}

/** `withheld` for an approval's request, answer and comment (approvals.ts builds the rest). */
export function putApprovalWithheld(
  out: Record<string, unknown>,
  a: { request: unknown; answer?: unknown; withheld?: Record<string, Withheld> | undefined },
): void {
  if (a.withheld) out.withheld = { ...a.withheld };
  putWithheld(out, { request: a.request, answer: a.answer });
}

export function workerJson(w: WorkerView): Record<string, unknown> {
  return {
    id: w.id,
    host: w.host,
    pid: w.pid,
    workflows: [...w.workflows],
    startedAt: iso(w.startedAt),
    heartbeatAt: iso(w.heartbeatAt),
    live: w.live,
  };
}

export function workflowJson(wf: Workflow<unknown, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: wf.id,
    name: wf.name,
    version: wf.version,
    validatesInput: wf.options.input !== undefined,
  };
  put(out, "budget", wf.options.budget && { ...wf.options.budget });
  return out;
}
