// What the API returns for what inspection holds: RunView, StepView, EventView and
// WorkerView as plain JSON (dates as ISO strings), and stored values (inputs, results,
// payloads) in a JSON form that never throws on what the codec can store — bigints, Maps,
// Sets, bytes, cycles, NaN — and never shows a value the codec could not decode.

import type { AttemptView, EventView, RunView, StepView, WorkerView, Workflow } from "../index.js";
import { EncryptedValue, UndecodableValue } from "../index.js";

export const UNDECODABLE_TEXT = "[undecodable value]";

/**
 * A stored value as JSON: Dates as ISO strings, bigints as decimal strings, Maps as
 * objects (as [key, value] pairs when a key is not a string), Sets and typed arrays as
 * arrays, Errors as {name, message}, NaN and ±Infinity as strings, a value met again inside
 * itself as "[Circular]", an undecodable value as "[undecodable value]".
 */
export function toJsonValue(value: unknown): unknown {
  return convert(value, new Set());
}

function convert(value: unknown, seen: Set<object>): unknown {
  switch (typeof value) {
    case "string":
    case "boolean":
      return value;
    case "number":
      return Number.isFinite(value) ? (Object.is(value, -0) ? 0 : value) : String(value);
    case "bigint":
      return value.toString();
    case "undefined":
      return null;
    case "object":
      break;
    default:
      return String(value);
  }
  if (value === null) return null;
  if (value instanceof UndecodableValue) return UNDECODABLE_TEXT;
  if (value instanceof EncryptedValue) return value.toJSON();
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (value instanceof RegExp) return value.toString();
  if (seen.has(value)) return "[Circular]";
  seen.add(value);
  try {
    if (value instanceof Error) return { name: value.name, message: value.message };
    if (ArrayBuffer.isView(value)) {
      return Array.from(value as unknown as ArrayLike<number | bigint>, (n) =>
        typeof n === "bigint" ? n.toString() : n,
      );
    }
    if (value instanceof ArrayBuffer) return Array.from(new Uint8Array(value));
    if (value instanceof Map) {
      const entries = [...value.entries()];
      if (entries.every(([k]) => typeof k === "string")) {
        const out: Record<string, unknown> = {};
        for (const [k, v] of entries) out[k as string] = convert(v, seen);
        return out;
      }
      return entries.map(([k, v]) => [convert(k, seen), convert(v, seen)]);
    }
    if (value instanceof Set) return [...value].map((v) => convert(v, seen));
    if (Array.isArray(value)) return value.map((v) => convert(v, seen));
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      if (v !== undefined) out[k] = convert(v, seen);
    }
    return out;
  } finally {
    seen.delete(value);
  }
}

const iso = (d: Date) => d.toISOString();

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
    budget: { limit: run.budget.limit, spent: run.budget.spent },
    createdAt: iso(run.createdAt),
    updatedAt: iso(run.updatedAt),
  };
  put(out, "reason", run.reason);
  put(out, "pausedFor", run.pausedFor);
  put(out, "error", run.error && errorJson(run.error));
  put(out, "parentId", run.parentId);
  put(out, "wakeAt", run.wakeAt && iso(run.wakeAt));
  put(out, "waitingFor", run.waitingFor && [...run.waitingFor]);
  return out;
}

export function runJson(run: RunView): Record<string, unknown> {
  const out = runSummaryJson(run);
  put(out, "input", run.input === undefined ? undefined : toJsonValue(run.input));
  if (run.status === "completed") out.output = toJsonValue(run.output);
  return out;
}

function errorJson(e: {
  name: string;
  code?: string | undefined;
  message: string;
  stack?: string | undefined;
}): Record<string, unknown> {
  const out: Record<string, unknown> = { name: e.name, message: e.message };
  put(out, "code", e.code);
  put(out, "stack", e.stack);
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
  return out;
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
