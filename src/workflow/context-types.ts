// The public shapes a workflow function sees: `ctx` and a step's `s`.

import type { RetryPolicy } from "../engine/retry.js";
import type { Duration } from "../lib/duration.js";
import type { Amounts } from "../store/store.js";
import type { Workflow } from "./define.js";

export interface StepContext {
  /** Stable for (run id, step key): the same on every attempt and every resume. */
  readonly idempotencyKey: string;
  /** 1-based attempt number. */
  readonly attempt: number;
  /** Aborted on timeout or cancel. */
  readonly signal: AbortSignal;
  /** Records spend (tokens, usd, ...) with this attempt. */
  spend(amounts: Amounts): void;
}

export interface StepOptions {
  retry?: Partial<RetryPolicy>;
  timeout?: Duration;
}

export interface Effect<T> {
  /** Performs the side effect; `key` is stable for this effect (pass it as a marker). */
  perform: (key: string, s: StepContext) => Promise<T> | T;
  /** Finds whether `perform` already happened: its result, or undefined if it did not. */
  reconcile: (key: string) => Promise<T | undefined> | T | undefined;
}

export type WaitResult<T> = { timedOut: false; payload: T } | { timedOut: true };

export interface WorkflowContext {
  readonly runId: string;
  readonly workflow: string;
  readonly version: string;
  /** Aborted when the run is canceled. */
  readonly signal: AbortSignal;
  /** Limit and spend of this run, as of this point of the replay. */
  readonly budget: { limit: Amounts; spent: Amounts };

  step<T>(name: string, fn: (s: StepContext) => Promise<T> | T, options?: StepOptions): Promise<T>;
  effect<T>(name: string, effect: Effect<T>, options?: StepOptions): Promise<T>;
  sleep(name: string, duration: Duration): Promise<void>;
  sleepUntil(name: string, until: Date | number): Promise<void>;
  waitForEvent<T = unknown>(name: string, options?: { timeout?: Duration }): Promise<WaitResult<T>>;
  child<I, O>(name: string, workflow: Workflow<I, O>, input: I): Promise<O>;
  now(): number;
  random(): number;
  uuid(): string;
}
