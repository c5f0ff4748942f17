// Waits (in real time: it never moves a virtual clock) until a run reaches a status.

import type { Engine, RunHandle } from "../engine/engine.js";
import type { RunView } from "../engine/views.js";
import type { RunStatus } from "../store/store.js";

export interface WaitForStatusOptions {
  /** Real milliseconds before giving up. Default 10,000. */
  timeoutMs?: number;
  /** Real milliseconds between looks. Default 5. */
  intervalMs?: number;
}

type Wanted = RunStatus | RunStatus[];

/** Resolves with the run once its status is `status` (or one of them); rejects after
 *  `timeoutMs` with the status it had. A run that finished in another status fails at once
 *  (it will not change again). */
export function waitForStatus(
  handle: RunHandle,
  status: Wanted,
  options?: WaitForStatusOptions,
): Promise<RunView>;
export function waitForStatus(
  engine: Engine,
  runId: string,
  status: Wanted,
  options?: WaitForStatusOptions,
): Promise<RunView>;
export async function waitForStatus(
  target: RunHandle | Engine,
  a: string | Wanted,
  b?: Wanted | WaitForStatusOptions,
  c?: WaitForStatusOptions,
): Promise<RunView> {
  const isHandle = "result" in target && "info" in target && !("start" in target);
  const runId = isHandle ? (target as RunHandle).id : (a as string);
  const status = (isHandle ? a : b) as Wanted;
  const options = ((isHandle ? b : c) ?? {}) as WaitForStatusOptions;
  const wanted = new Set(Array.isArray(status) ? status : [status]);
  if (wanted.size === 0) throw new TypeError("waitForStatus: give at least one status");
  const read = () => (isHandle ? (target as RunHandle).info() : (target as Engine).getRun(runId));
  const timeoutMs = options.timeoutMs ?? 10_000;
  // A number of ms, not a Duration: "10s" (or NaN) made the deadline NaN, and the wait never
  // gave up (Date.now() > NaN is false).
  for (const [name, v] of [
    ["timeoutMs", timeoutMs],
    ["intervalMs", options.intervalMs ?? 5],
  ] as const) {
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
      throw new TypeError(
        `waitForStatus: ${name} must be a finite number of milliseconds >= 0 (got ${typeof v === "string" ? JSON.stringify(v) : String(v)})`,
      );
    }
  }
  const deadline = Date.now() + timeoutMs;
  let last: RunView | undefined;
  for (;;) {
    last = await read();
    if (last && wanted.has(last.status)) return last;
    const finished = last && ["completed", "failed", "canceled"].includes(last.status);
    if (finished || Date.now() > deadline) {
      const now = last
        ? `it is ${last.status}${last.reason ? ` (${last.reason})` : ""}`
        : "no such run exists";
      const why = finished ? "it finished" : `${timeoutMs} ms passed`;
      throw new Error(
        `waitForStatus: run "${runId}" did not become ${[...wanted].join(" or ")}: ${now}; gave up because ${why}`,
      );
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 5));
  }
}
