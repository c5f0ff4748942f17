// The public shapes a workflow function sees: `ctx` and a step's `s`.

import type { StandardSchemaV1 } from "@standard-schema/spec";
import type { Duration } from "../lib/duration.js";
import type { Amounts } from "../store/store.js";
import type { Workspace, WorkspaceOptions } from "../workspace/types.js";
import type { Workflow } from "./define.js";
import type { RetryPolicy } from "./retry.js";

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
  /** What one attempt is expected to spend (e.g. { tokens: 4000 }). It is reserved while
   *  the attempt runs, so parallel attempts cannot all pass the budget check before any has
   *  spent: an attempt starts only if spent + reserved + its estimate stays within every
   *  limit (else it waits for attempts in flight, or the run pauses). */
  estimate?: Amounts;
}

/** StepOptions' names, every one (an option added to the type but not here fails to
 *  compile): what ctx.step, ctx.effect and cairn/ai's per-tool options take. */
export const STEP_OPTION_NAMES = [
  "retry",
  "timeout",
  "estimate",
] as const satisfies readonly (keyof StepOptions)[];
const EVERY_STEP_OPTION: Exclude<
  keyof StepOptions,
  (typeof STEP_OPTION_NAMES)[number]
> extends never
  ? true
  : never = true;
void EVERY_STEP_OPTION;

export interface Effect<T> {
  /** Performs the side effect; `key` is stable for this effect (pass it as a marker). */
  perform: (key: string, s: StepContext) => Promise<T> | T;
  /** Finds whether `perform` already happened: its result, or undefined if it did not. */
  reconcile: (key: string) => Promise<T | undefined> | T | undefined;
}

export type WaitResult<T> = { timedOut: false; payload: T } | { timedOut: true };

export interface WaitOptions<T> {
  /** How long to wait (from when the wait is first reached); no timeout if absent. */
  timeout?: Duration;
  /** A Standard Schema (zod, valibot, ...) for the payload: an event it refuses is consumed
   *  and the wait fails with InputValidationError naming the issues. */
  schema?: StandardSchemaV1<unknown, T>;
}

export interface ApprovalOptions<R = unknown, A = unknown> {
  /** What is asked: a summary, a diff, what the agent wants to do. Stored with the run and
   *  shown by `cairn show`, the dashboard and the approval link's page. */
  request: R;
  /** How long to wait for an answer (default: no limit). Counted from when the approval
   *  was first requested, on any replay (an asking a resume reopens: from the resume). */
  timeout?: Duration;
  /** The decision taken when the timeout passes (default "reject"). */
  onTimeout?: "approve" | "reject";
  /** Standard Schemas (zod, valibot, arktype, ...): the request is checked before it is
   *  stored; structured answer data when the answer arrives. Either failing fails this
   *  call with an InputValidationError listing the issues (recorded: a replay rethrows it). */
  schema?: { request?: StandardSchemaV1<unknown, R>; answer?: StandardSchemaV1<unknown, A> };
}

/** The outcome of ctx.approval: who decided what, when, and why. */
export interface ApprovalResult<A = unknown> {
  approved: boolean;
  decision: "approved" | "rejected";
  /** The timeout decided (the workflow's onTimeout), not a person. */
  timedOut: boolean;
  /** Who answered, as the answering client stated it (absent after a timeout). */
  by?: string;
  /** When the answer was stored (or the deadline, after a timeout). */
  at: Date;
  comment?: string;
  /** Structured answer data, if the answer carried some (checked by schema.answer). */
  answer?: A;
  /** How the answer came: "cli", "api", "dashboard", "link", "engine". */
  via?: string;
}

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
  waitForEvent<T = unknown>(name: string, options?: WaitOptions<T>): Promise<WaitResult<T>>;
  child<I, O>(name: string, workflow: Workflow<I, O>, input: I): Promise<O>;
  /**
   * Makes a directory part of the run's durable state. Opening is recorded (the directory's
   * content then is the base); after each `ws.step` what changed is checkpointed into the
   * store with the step's record, and on any resume, on any machine, the directory is
   * restored to the checkpoint of the last recorded step before anything else executes.
   */
  workspace(name: string, options?: WorkspaceOptions): Promise<Workspace>;
  /**
   * Asks a person to approve or reject, and waits (holding no lease, no memory) for the
   * answer: `cairn approve`, the dashboard, the HTTP API, or a signed approval link. The
   * request is stored with the run; the answer records who, when and an optional comment;
   * with a timeout, the run takes the `onTimeout` decision when it passes.
   */
  approval<R = unknown, A = unknown>(
    name: string,
    options: ApprovalOptions<R, A>,
  ): Promise<ApprovalResult<A>>;
  /** The time, recorded: the same on every replay. Concurrent branches that draw one after
   *  awaiting something that is not a recorded call give a label (see the replay rules). */
  now(label?: string): number;
  random(label?: string): number;
  uuid(label?: string): string;
}
