// The durable boundaries of a run, read off the store calls an engine makes: before and
// after each intent (an effect about to perform, a wait or sleep begun, a child started),
// before and after each call's record, after each failed attempt that schedules a retry
// (the backoff), and before each step function runs. Each has a label a person can read.

import type { RunWrite, StepKind } from "../store/store.js";
import type { StoreCall } from "./crashable-store.js";

export type BoundaryPoint =
  | "before-function"
  | "before-intent"
  | "after-intent"
  | "before-record"
  | "after-record"
  | "backoff";

export interface Boundary {
  point: BoundaryPoint;
  runId: string;
  key: string;
  kind: StepKind;
  /** For "backoff" (the attempt that failed) and "before-function" (the attempt about to
   *  run). */
  attempt?: number;
  /** e.g. `between effect "open-pr"'s intent and its perform`. */
  label: string;
}

export function boundaryId(b: Omit<Boundary, "label">): string {
  return `${b.point} ${b.runId} ${b.key} ${b.attempt ?? ""}`;
}

function label(point: BoundaryPoint, kind: StepKind, key: string, attempt?: number): string {
  const call = `${kind} "${key}"`;
  if (point === "backoff") return `during the backoff of ${call} after attempt ${attempt} failed`;
  if (point === "before-function") return `before ${call} runs (attempt ${attempt})`;
  if (kind === "effect") {
    return {
      "before-intent": `before effect "${key}" (nothing recorded yet)`,
      "after-intent": `between effect "${key}"'s intent and its perform`,
      "before-record": `between effect "${key}"'s perform and its completion record`,
      "after-record": `after effect "${key}"'s completion record`,
    }[point];
  }
  if (kind === "wait" || kind === "sleep" || kind === "approval") {
    return {
      "before-intent": `as ${call} begins (nothing recorded yet)`,
      "after-intent": `during ${call}`,
      "before-record": `after ${call} ended, before its record`,
      "after-record": `after ${call}'s record`,
    }[point];
  }
  if (kind === "step") {
    if (point === "before-record") return `after step "${key}" returned, before its record`;
    if (point === "after-record") return `after step "${key}"'s record`;
  }
  if (kind === "child") {
    if (point === "after-intent") return `after child "${key}" was started`;
    if (point === "before-intent") return `before child "${key}" is started`;
  }
  return point === "after-record" || point === "after-intent"
    ? `after ${call}'s ${point === "after-intent" ? "intent" : "record"}`
    : `before ${call}'s ${point === "before-intent" ? "intent" : "record"}`;
}

export function makeBoundary(b: Omit<Boundary, "label">): Boundary {
  return { ...b, label: label(b.point, b.kind, b.key, b.attempt) };
}

/** The boundaries a store call crosses: `when` "before" it runs or "after" it committed. */
export function boundariesOf(call: StoreCall, when: "before" | "after"): Boundary[] {
  if (call.verb !== "appendRecords") return [];
  const out: Boundary[] = [];
  for (const w of call.args[0] as RunWrite[]) {
    for (const i of w.intents ?? []) {
      const point = when === "before" ? "before-intent" : "after-intent";
      out.push(makeBoundary({ point, runId: w.runId, key: i.key, kind: i.kind }));
    }
    for (const s of w.steps ?? []) {
      const point = when === "before" ? "before-record" : "after-record";
      out.push(makeBoundary({ point, runId: w.runId, key: s.key, kind: s.kind }));
    }
    if (when === "after") {
      for (const a of w.attempts ?? []) {
        if (a.retryAt === null) continue;
        out.push(
          makeBoundary({
            point: "backoff",
            runId: w.runId,
            key: a.key,
            kind: "step",
            attempt: a.attempt,
          }),
        );
      }
    }
  }
  return out;
}
