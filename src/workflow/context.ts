// The replay cursor: executes ONE replay of a run. It holds the run's journal (read once),
// answers every ctx call from it when a record exists, executes what is missing, and
// decides how the execution ends: completed, failed, suspended (every branch blocked on a
// wait), paused (budget), canceled, or lease lost. First run and resume are this one path.
//
// Invariants kept here:
// - record before resolve: a call's promise settles only after its record is durable, and
//   it settles with the DECODED copy of what was stored;
// - determinism: a call whose key has a record of another kind, or a new call while
//   recorded calls remain unreplayed (checked once pending microtasks settle), fails the
//   run with NonDeterminismError and writes nothing more;
// - once halted, nothing more is written and late results are discarded.
//
// Why one file past 400 lines: every call kind (step, effect, sleep, wait, child, now) reads
// and changes the same small state machine — the journal cursor, the count of active work,
// the set of blocked branches, the halt — and suspension is only correct if they all do it
// the same way. Splitting it would put that state behind an interface wider than the file.

import { randomUUID } from "node:crypto";
import { decode, EncodeError, encode } from "../codec/codec.js";
import { WriteConflictError } from "../engine/committer.js";
import { backoffMs, type RetryPolicy, resolvePolicy, retryAfterMs } from "../engine/retry.js";
import {
  errorFromRecord,
  FatalError,
  LeaseLostError,
  NonDeterminismError,
  RateLimitError,
  RunCanceledError,
  SerializationError,
  StepTimeoutError,
} from "../errors.js";
import { addAmounts } from "../lib/amounts.js";
import type { Clock } from "../lib/clock.js";
import { type Duration, toMs } from "../lib/duration.js";
import { idempotencyKey } from "../lib/ids.js";
import type {
  Amounts,
  AttemptRecord,
  ErrorRecord,
  EventRecord,
  IntentRecord,
  Journal,
  RunWrite,
  StepKind,
  StepRecord,
} from "../store/store.js";
import type {
  Effect,
  StepContext,
  StepOptions,
  WaitResult,
  WorkflowContext,
} from "./context-types.js";
import type { Workflow } from "./define.js";

export type Outcome =
  | { kind: "completed"; output: unknown }
  | { kind: "failed"; error: Error }
  | { kind: "suspended"; wakeAt: number | null; waitingFor: string[] }
  | { kind: "paused"; reason: string }
  | { kind: "canceled"; reason: string }
  | { kind: "lease-lost" }
  /** The store failed (connection lost, disk full): stop without failing the run; it is
   *  handed back and resumed from its journal. */
  | { kind: "interrupted"; error: Error }
  /** Replay-only mode: every recorded call matched and the code wants to execute or record
   *  something new (the end of the journal). */
  | { kind: "frontier"; key: string };

/** What the context needs from the engine; nothing here knows about a backend. */
export interface ContextHost {
  runId: string;
  workflow: string;
  version: string;
  generation: number;
  /** The previous execution ended without releasing the run (a crash or a lost lease). */
  recovered: boolean;
  /** Replay only (the replay check): never execute a step body or write anything; stop at
   *  the first call that would. */
  replayOnly?: boolean;
  budgetLimit: Amounts;
  budgetSpent: Amounts;
  clock: Clock;
  maxPayloadBytes: number;
  /** Backoffs up to this long wait in process; longer ones suspend the run. */
  inProcessRetryMs: number;
  retry?: Partial<RetryPolicy> | undefined;
  /** Durable write of this run's records (fenced by the execution's epoch). */
  commit(write: Omit<RunWrite, "runId" | "epoch">): Promise<void>;
  /** Creates the child run (idempotent on its id). */
  startChild(childId: string, wf: Workflow<unknown, unknown>, input: unknown): Promise<void>;
  /** Re-reads the run's unconsumed events (after a hint that one arrived). */
  loadEvents(): Promise<EventRecord[]>;
}

interface Blocked {
  key: string;
  wakeAt: number | null;
  event?: string;
  budget?: string;
  wake: () => void;
  timer?: AbortController;
}

export const CHILD_EVENT_PREFIX = "cairn.child:";
const NAME_RE = /^[^@#\s][^#]{0,199}$/;

function never<T>(): Promise<T> {
  return new Promise<T>(() => {});
}

export function toErrorRecord(err: unknown): ErrorRecord {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return {
      name: err.name,
      code: typeof code === "string" ? code : undefined,
      message: err.message,
      stack: err.stack,
    };
  }
  return { name: "Error", message: String(err) };
}

export class Context {
  private readonly steps = new Map<string, StepRecord>();
  private readonly attempts = new Map<string, AttemptRecord[]>();
  private readonly allAttemptSpend = new Map<string, Amounts>();
  private readonly intents = new Map<string, IntentRecord>();
  private events: EventRecord[];
  private readonly seenEventSeqs = new Set<number>();
  /** Journal records replayed so far (keys of `steps`). */
  private readonly consumed = new Set<string>();
  private readonly counts = new Map<string, number>();
  private readonly blocked = new Set<Blocked>();
  private readonly liveAttempts = new Set<AbortController>();
  private readonly runAbort = new AbortController();
  private readonly totalSpent: Amounts;
  private readonly replaySpent: Amounts = {};
  private seq = 0;
  private active = 0;
  private suspendScheduled = false;
  private committedAny = false;
  private halted: Outcome | undefined;
  private resolveDone!: (o: Outcome) => void;
  readonly done: Promise<Outcome> = new Promise<Outcome>((r) => {
    this.resolveDone = r;
  });
  readonly api: WorkflowContext;

  constructor(
    private readonly host: ContextHost,
    journal: Journal,
  ) {
    for (const s of journal.steps) this.steps.set(s.key, s);
    for (const a of journal.attempts) {
      const spend = this.allAttemptSpend.get(a.key) ?? {};
      addAmounts(spend, a.spend);
      this.allAttemptSpend.set(a.key, spend);
      if (a.generation !== host.generation) continue;
      const list = this.attempts.get(a.key) ?? [];
      list.push(a);
      this.attempts.set(a.key, list);
    }
    for (const list of this.attempts.values()) list.sort((x, y) => x.attempt - y.attempt);
    for (const i of journal.intents) this.intents.set(i.key, i);
    this.events = [...journal.events].sort((a, b) => a.seq - b.seq);
    for (const e of this.events) this.seenEventSeqs.add(e.seq);
    this.totalSpent = { ...host.budgetSpent };
    this.api = this.makeApi();
  }

  /** Runs the workflow function; resolves with how this execution ends. */
  start(fn: (ctx: WorkflowContext, input: unknown) => Promise<unknown>, input: unknown) {
    Promise.resolve()
      .then(() => fn(this.api, input))
      .then(
        (output) => {
          const left = this.firstUnconsumed();
          if (left && !this.halted) {
            this.halt({
              kind: "failed",
              error: new NonDeterminismError(
                `Run "${this.host.runId}" no longer matches its journal: the workflow returned, but the journal recorded ${left.kind} "${left.name}" (key "${left.key}") that this code never called. Run the code this run started on (${this.host.workflow}@${this.host.version}), or fork the run onto a new version.`,
              ),
            });
          }
          this.halt({ kind: "completed", output });
        },
        (err: unknown) => this.halt({ kind: "failed", error: err as Error }),
      );
    return this.done;
  }

  /** How many recorded calls this execution has replayed so far. */
  get replayed(): number {
    return this.consumed.size;
  }

  /** Cancels this execution: signals abort, late results are discarded. */
  cancel(reason: string): void {
    this.halt({ kind: "canceled", reason });
  }

  leaseLost(): void {
    this.halt({ kind: "lease-lost" });
  }

  /** New events may have arrived for this run: re-read them and wake matching waits. */
  async poke(): Promise<void> {
    if (this.halted || ![...this.blocked].some((b) => b.event)) return;
    const fresh = await this.host.loadEvents();
    this.addEvents(fresh);
  }

  addEvents(fresh: EventRecord[]): void {
    let added = false;
    for (const e of fresh) {
      if (this.seenEventSeqs.has(e.seq)) continue;
      this.seenEventSeqs.add(e.seq);
      this.events.push(e);
      added = true;
    }
    if (!added) return;
    this.events.sort((a, b) => a.seq - b.seq);
    for (const b of [...this.blocked]) {
      if (b.event && this.events.some((e) => e.name === b.event)) b.wake();
    }
  }

  // ---- the public ctx ----

  private makeApi(): WorkflowContext {
    const self = this;
    return {
      runId: this.host.runId,
      workflow: this.host.workflow,
      version: this.host.version,
      signal: this.runAbort.signal,
      get budget() {
        return { limit: { ...self.host.budgetLimit }, spent: { ...self.replaySpent } };
      },
      step: (name, fn, options) => this.step(name, fn, options),
      effect: (name, effect, options) => this.effect(name, effect, options),
      sleep: (name, duration) => this.sleep(name, duration),
      sleepUntil: (name, until) => this.sleepUntil(name, until),
      waitForEvent: (name, options) => this.waitForEvent(name, options),
      child: (name, wf, input) => this.child(name, wf as Workflow<unknown, unknown>, input),
      now: () => this.syncValue("now", () => this.host.clock.now()),
      random: () => this.syncValue("random", () => Math.random()),
      uuid: () => this.syncValue("uuid", () => randomUUID()),
    } as WorkflowContext;
  }

  private async step<T>(
    name: string,
    fn: (s: StepContext) => Promise<T> | T,
    options?: StepOptions,
  ): Promise<T> {
    const { key, seq } = this.nextCall(name, "step");
    const rec = this.replay(key, "step", name);
    if (rec) return this.replayedValue<T>(rec);
    await this.divergenceCheck(key, "step", name);
    return this.runAttempts<T>(key, seq, name, "step", options, (s) => fn(s));
  }

  private async effect<T>(name: string, effect: Effect<T>, options?: StepOptions): Promise<T> {
    const { key, seq } = this.nextCall(name, "effect");
    const rec = this.replay(key, "effect", name);
    if (rec) return this.replayedValue<T>(rec);
    await this.divergenceCheck(key, "effect", name);
    const idem = idempotencyKey(this.host.runId, key);
    // perform may already have started (intent recorded by an earlier execution): ask
    // reconcile first. After perform throws, the next attempt asks reconcile again.
    let mayHaveHappened = this.intents.has(key);
    if (!mayHaveHappened) {
      await this.commit({ intents: [this.intent(key, "effect", name, { idempotencyKey: idem })] });
    }
    return this.runAttempts<T>(key, seq, name, "effect", options, async (s) => {
      if (mayHaveHappened) {
        const found = await effect.reconcile(idem);
        if (found !== undefined) return found;
      }
      mayHaveHappened = true;
      return effect.perform(idem, s);
    });
  }

  private sleep(name: string, duration: Duration): Promise<void> {
    const ms = toMs(duration, `ctx.sleep("${name}") duration`);
    return this.sleepCall(name, (now) => now + ms);
  }

  private sleepUntil(name: string, until: Date | number): Promise<void> {
    const at = until instanceof Date ? until.getTime() : until;
    if (!Number.isFinite(at)) {
      return Promise.reject(new TypeError(`ctx.sleepUntil("${name}"): expected a Date or ms`));
    }
    return this.sleepCall(name, () => at);
  }

  private async sleepCall(name: string, wakeAtFrom: (now: number) => number): Promise<void> {
    const { key, seq } = this.nextCall(name, "sleep");
    const rec = this.replay(key, "sleep", name);
    if (rec) return this.replayedValue<void>(rec);
    await this.divergenceCheck(key, "sleep", name);
    const startedAt = this.host.clock.now();
    let wakeAt: number;
    const intent = this.intents.get(key);
    if (intent) {
      wakeAt = decode<{ wakeAt: number }>(intent.data).wakeAt;
    } else {
      wakeAt = wakeAtFrom(startedAt);
      await this.commit({ intents: [this.intent(key, "sleep", name, { wakeAt })] });
    }
    while (this.host.clock.now() < wakeAt) await this.block({ key, wakeAt });
    await this.recordOk(key, seq, name, "sleep", undefined, startedAt);
  }

  private async waitForEvent<T>(
    name: string,
    options?: { timeout?: Duration },
  ): Promise<WaitResult<T>> {
    if (name.startsWith("cairn.")) {
      throw new TypeError(`ctx.waitForEvent("${name}"): names starting with "cairn." are reserved`);
    }
    const timeoutMs =
      options?.timeout === undefined
        ? undefined
        : toMs(options.timeout, `ctx.waitForEvent("${name}") timeout`);
    const { key, seq } = this.nextCall(name, "wait");
    const rec = this.replay(key, "wait", name);
    if (rec) return this.replayedValue<WaitResult<T>>(rec);
    await this.divergenceCheck(key, "wait", name);
    const startedAt = this.host.clock.now();
    let deadline: number | null;
    const intent = this.intents.get(key);
    if (intent) {
      deadline = decode<{ deadline: number | null }>(intent.data).deadline;
    } else {
      deadline = timeoutMs === undefined ? null : startedAt + timeoutMs;
      await this.commit({ intents: [this.intent(key, "wait", name, { deadline, event: name })] });
    }
    for (;;) {
      const ev = this.takeEvent(name);
      if (ev) {
        const result = { timedOut: false, payload: decode<T>(ev.payload) };
        return this.recordOk(key, seq, name, "wait", result, startedAt, [
          { eventSeq: ev.seq, key },
        ]) as Promise<WaitResult<T>>;
      }
      if (deadline !== null && this.host.clock.now() >= deadline) {
        return this.recordOk(key, seq, name, "wait", { timedOut: true }, startedAt) as Promise<
          WaitResult<T>
        >;
      }
      await this.block({ key, wakeAt: deadline, event: name });
    }
  }

  private async child<O>(name: string, wf: Workflow<unknown, unknown>, input: unknown): Promise<O> {
    const { key, seq } = this.nextCall(name, "child");
    const rec = this.replay(key, "child", name);
    if (rec) return this.replayedValue<O>(rec);
    await this.divergenceCheck(key, "child", name);
    const startedAt = this.host.clock.now();
    const childId = `${this.host.runId}:${key}`;
    if (!this.intents.has(key)) {
      // The child id is derived from (run, key), so starting it again after a crash is a
      // no-op: the child is created once.
      if (this.host.replayOnly) return this.reachFrontier(key);
      await this.host.startChild(childId, wf, input);
      await this.commit({ intents: [this.intent(key, "child", name, { childId })] });
    }
    const eventName = `${CHILD_EVENT_PREFIX}${childId}`;
    for (;;) {
      const ev = this.takeEvent(eventName);
      if (ev) {
        const res = decode<{ output?: unknown; error?: ErrorRecord }>(ev.payload);
        const consume = [{ eventSeq: ev.seq, key }];
        if (res.error) {
          await this.commit({
            steps: [this.stepRecord(key, seq, name, "child", startedAt, null, res.error, {}, 1)],
            consume,
          });
          throw errorFromRecord(res.error);
        }
        return this.recordOk(key, seq, name, "child", res.output, startedAt, consume) as Promise<O>;
      }
      await this.block({ key, wakeAt: null, event: eventName });
    }
  }

  private syncValue<T>(kind: "now" | "random" | "uuid", produce: () => T): T {
    if (this.halted) return produce();
    const { key, seq } = this.nextCall(`@${kind}`, kind);
    const rec = this.steps.get(key);
    if (rec) {
      this.replay(key, kind, `@${kind}`);
      return decode<T>(rec.result ?? "");
    }
    const value = produce();
    const now = this.host.clock.now();
    const record = this.stepRecord(key, seq, `@${kind}`, kind, now, encode(value), null, {}, 1);
    // Not awaited by the caller; durable before any later record of this run (FIFO).
    void this.divergenceCheck(key, kind, `@${kind}`).then(() => this.commit({ steps: [record] }));
    return value;
  }

  // ---- attempts, retries, budget ----

  private async runAttempts<T>(
    key: string,
    seq: number,
    name: string,
    kind: StepKind,
    options: StepOptions | undefined,
    body: (s: StepContext) => Promise<T> | T,
  ): Promise<T> {
    const policy = resolvePolicy(this.host.retry, options?.retry);
    const timeoutMs =
      options?.timeout === undefined
        ? undefined
        : toMs(options.timeout, `timeout of step "${key}"`);
    const prior = this.attempts.get(key) ?? [];
    const clock = this.host.clock;
    if (this.host.replayOnly) return this.reachFrontier(key);
    if (this.host.recovered && !this.committedAny) {
      // The previous execution stopped without releasing the run while this call had no
      // record: its attempt crashed with the worker. It counts, so a step that keeps
      // killing its process fails after maxAttempts instead of looping forever.
      const now = clock.now();
      const crashed: AttemptRecord = {
        runId: this.host.runId,
        key,
        attempt: prior.length + 1,
        generation: this.host.generation,
        startedAt: now,
        endedAt: now,
        error: {
          name: "WorkerLostError",
          code: "WORKER_LOST",
          message: `The worker executing step "${key}" stopped (crash, kill or lost lease) before recording an outcome`,
        },
        spend: {},
        retryAt: now,
      };
      await this.commit({ attempts: [crashed] });
      prior.push(crashed);
    }
    for (;;) {
      const last = prior.at(-1);
      if (last && (last.retryAt === null || prior.length >= policy.maxAttempts)) {
        throw errorFromRecord(last.error);
      }
      if (last?.retryAt != null) {
        const wait = last.retryAt - clock.now();
        if (wait > this.host.inProcessRetryMs) {
          await this.block({ key, wakeAt: last.retryAt });
        } else if (wait > 0) {
          await this.sleepInProcess(wait);
        }
      }
      const over = this.overBudget();
      if (over) {
        await this.block({ key, wakeAt: null, budget: over });
        continue;
      }
      const attempt = prior.length + 1;
      const spend: Amounts = {};
      const ac = new AbortController();
      this.liveAttempts.add(ac);
      const s: StepContext = {
        idempotencyKey: idempotencyKey(this.host.runId, key),
        attempt,
        signal: ac.signal,
        spend: (amounts) => {
          for (const [k, v] of Object.entries(amounts)) {
            if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
              throw new TypeError(
                `s.spend() in step "${key}": amount "${k}" must be a finite number >= 0 (got ${String(v)})`,
              );
            }
          }
          addAmounts(spend, amounts);
        },
      };
      const startedAt = clock.now();
      this.active++;
      let value: T;
      let failure: unknown;
      let failed = false;
      try {
        value = await this.withTimeout(body(s), timeoutMs, ac, key);
      } catch (err) {
        failed = true;
        failure = err;
      } finally {
        this.active--;
        this.liveAttempts.delete(ac);
      }
      if (this.halted) return never();
      if (!failed) {
        let encoded: string;
        try {
          encoded = encode(value!, this.host.maxPayloadBytes);
        } catch (err) {
          if (!(err instanceof EncodeError)) throw err;
          failed = true;
          failure = new SerializationError(
            `Step "${key}" of run "${this.host.runId}" returned a value that ${err.message}; step results must be serializable (plain data, Date, Map, Set, BigInt, Uint8Array, Error) and within the payload limit`,
            { cause: err },
          );
        }
        if (!failed) {
          const rec = this.stepRecord(
            key,
            seq,
            name,
            kind,
            startedAt,
            encoded!,
            null,
            spend,
            attempt,
          );
          await this.commit({ steps: [rec] });
          addAmounts(this.replaySpent, spend);
          return decode<T>(encoded!);
        }
      }
      const errRec = toErrorRecord(failure);
      const final =
        failure instanceof FatalError ||
        failure instanceof SerializationError ||
        errRec.code === "FATAL" ||
        attempt >= policy.maxAttempts;
      let delay = 0;
      if (!final) {
        const now = clock.now();
        delay = backoffMs(policy, attempt, Math.random);
        if (failure instanceof RateLimitError || errRec.code === "RATE_LIMIT") {
          const ra = retryAfterMs((failure as RateLimitError).retryAfter, now);
          delay = Math.max(delay, ra);
        }
      }
      const endedAt = clock.now();
      const rec: AttemptRecord = {
        runId: this.host.runId,
        key,
        attempt,
        generation: this.host.generation,
        startedAt,
        endedAt,
        error: errRec,
        spend,
        retryAt: final ? null : endedAt + delay,
      };
      await this.commit({ attempts: [rec] });
      addAmounts(this.replaySpent, spend);
      prior.push(rec);
      this.attempts.set(key, prior);
      if (final) throw errorFromRecord(errRec);
    }
  }

  private async withTimeout<T>(
    p: Promise<T> | T,
    timeoutMs: number | undefined,
    ac: AbortController,
    key: string,
  ): Promise<T> {
    if (timeoutMs === undefined) return p;
    const timer = new AbortController();
    const timeout = this.host.clock.sleep(timeoutMs, timer.signal).then(() => {
      const err = new StepTimeoutError(
        `Step "${key}" of run "${this.host.runId}" did not finish within ${timeoutMs} ms; its signal was aborted`,
      );
      ac.abort(err);
      throw err;
    });
    timeout.catch(() => {});
    try {
      return await Promise.race([Promise.resolve(p), timeout]);
    } finally {
      timer.abort();
    }
  }

  private overBudget(): string | undefined {
    for (const [name, limit] of Object.entries(this.host.budgetLimit)) {
      const spent = this.totalSpent[name] ?? 0;
      if (spent >= limit) {
        const whole = Number.isInteger(spent) && Number.isInteger(limit);
        const f = (n: number) => (whole ? String(n) : n.toFixed(2));
        return `budget: ${name} ${f(spent)} of ${f(limit)} spent`;
      }
    }
    return undefined;
  }

  // ---- journal matching ----

  private nextCall(name: string, kind: StepKind): { key: string; seq: number } {
    if (this.halted) throw new HaltedSignal();
    const internal =
      name.startsWith("@") && (kind === "now" || kind === "random" || kind === "uuid");
    if (!internal && (typeof name !== "string" || !NAME_RE.test(name))) {
      throw new TypeError(
        `ctx.${kind}(${JSON.stringify(name)}) in run "${this.host.runId}": a name must be 1-200 characters, must not contain "#" and must not start with "@" or a space`,
      );
    }
    const n = (this.counts.get(name) ?? 0) + 1;
    this.counts.set(name, n);
    return { key: n === 1 ? name : `${name}#${n}`, seq: this.seq++ };
  }

  private replay(key: string, kind: StepKind, name: string): StepRecord | undefined {
    const rec = this.steps.get(key);
    if (!rec) return undefined;
    if (rec.kind !== kind || rec.name !== name) {
      const err = new NonDeterminismError(
        `Run "${this.host.runId}" no longer matches its journal at key "${key}": the journal recorded ${rec.kind} "${rec.name}", the code now calls ${kind} "${name}". Run the code this run started on (${this.host.workflow}@${this.host.version}), or fork the run onto a new version.`,
      );
      this.halt({ kind: "failed", error: err });
      throw new HaltedSignal();
    }
    if (!this.consumed.has(key)) {
      this.consumed.add(key);
      addAmounts(this.replaySpent, rec.spend);
      const attemptSpend = this.allAttemptSpend.get(key);
      if (attemptSpend) addAmounts(this.replaySpent, attemptSpend);
    }
    return rec;
  }

  private replayedValue<T>(rec: StepRecord): Promise<T> {
    if (rec.outcome === "error" && rec.error) return Promise.reject(errorFromRecord(rec.error));
    return Promise.resolve(decode<T>(rec.result ?? ""));
  }

  private firstUnconsumed(): StepRecord | undefined {
    let first: StepRecord | undefined;
    for (const rec of this.steps.values()) {
      if (this.consumed.has(rec.key)) continue;
      if (!first || rec.seq < first.seq) first = rec;
    }
    return first;
  }

  /** A call with no record while recorded calls remain unreplayed: wait until pending
   *  microtasks (other branches replaying) settle, then any record still unreplayed means
   *  the code diverged from the journal. */
  private async divergenceCheck(key: string, kind: StepKind, name: string): Promise<void> {
    // Every key in `consumed` is a journal record, so equal sizes mean all were replayed.
    if (this.consumed.size === this.steps.size) return;
    this.active++;
    try {
      await new Promise<void>((r) => setImmediate(r));
    } finally {
      this.active--;
    }
    const left = this.firstUnconsumed();
    if (left && !this.halted) {
      this.halt({
        kind: "failed",
        error: new NonDeterminismError(
          `Run "${this.host.runId}" no longer matches its journal: the code now calls ${kind} "${name}" (key "${key}") where the journal recorded ${left.kind} "${left.name}" (key "${left.key}", call #${left.seq + 1}). Run the code this run started on (${this.host.workflow}@${this.host.version}), or fork the run onto a new version.`,
        ),
      });
    }
    if (this.halted) return never();
  }

  // ---- waiting and suspension ----

  private takeEvent(name: string): EventRecord | undefined {
    const i = this.events.findIndex((e) => e.name === name);
    if (i < 0) return undefined;
    return this.events.splice(i, 1)[0];
  }

  /** Blocks this branch until woken in process (its timer fires or an event arrives). When
   *  every branch is blocked, the execution suspends and the promise never settles. */
  private block(b: Omit<Blocked, "wake" | "timer">): Promise<void> {
    if (this.halted) return never();
    return new Promise<void>((resolve) => {
      const entry: Blocked = {
        ...b,
        wake: () => {
          if (!this.blocked.delete(entry)) return;
          entry.timer?.abort();
          resolve();
        },
      };
      this.blocked.add(entry);
      if (b.wakeAt !== null) {
        entry.timer = new AbortController();
        const ms = Math.max(0, b.wakeAt - this.host.clock.now());
        this.host.clock.sleep(ms, entry.timer.signal).then(
          () => entry.wake(),
          () => {},
        );
      }
      this.maybeSuspend();
    });
  }

  private async sleepInProcess(ms: number): Promise<void> {
    this.active++;
    try {
      await this.host.clock.sleep(ms, this.runAbort.signal);
    } catch {
      return never();
    } finally {
      this.active--;
    }
  }

  private maybeSuspend(): void {
    if (this.suspendScheduled || this.halted || this.active > 0 || this.blocked.size === 0) return;
    this.suspendScheduled = true;
    setImmediate(() => {
      this.suspendScheduled = false;
      if (this.halted || this.active > 0 || this.blocked.size === 0) return;
      const budget = [...this.blocked].find((b) => b.budget);
      if (budget?.budget) {
        this.halt({ kind: "paused", reason: budget.budget });
        return;
      }
      let wakeAt: number | null = null;
      const waitingFor = new Set<string>();
      for (const b of this.blocked) {
        if (b.wakeAt !== null && (wakeAt === null || b.wakeAt < wakeAt)) wakeAt = b.wakeAt;
        if (b.event) waitingFor.add(b.event);
      }
      this.halt({ kind: "suspended", wakeAt, waitingFor: [...waitingFor] });
    });
  }

  private halt(o: Outcome): void {
    if (this.halted) return;
    this.halted = o;
    for (const b of this.blocked) b.timer?.abort();
    this.blocked.clear();
    if (o.kind === "canceled" || o.kind === "lease-lost" || o.kind === "interrupted") {
      const reason =
        o.kind === "canceled"
          ? new RunCanceledError(`Run "${this.host.runId}" was canceled: ${o.reason}`)
          : o.kind === "lease-lost"
            ? new LeaseLostError(`Run "${this.host.runId}": lease lost`)
            : o.error;
      for (const ac of this.liveAttempts) ac.abort(reason);
      this.runAbort.abort(reason);
    }
    this.resolveDone(o);
  }

  // ---- records ----

  private reachFrontier<T>(key: string): Promise<T> {
    this.halt({ kind: "frontier", key });
    return never();
  }

  private async commit(write: Omit<RunWrite, "runId" | "epoch">): Promise<void> {
    if (this.halted) return never();
    if (this.host.replayOnly) {
      const key =
        write.steps?.[0]?.key ?? write.intents?.[0]?.key ?? write.attempts?.[0]?.key ?? "";
      return this.reachFrontier(key);
    }
    this.active++;
    try {
      await this.host.commit(write);
    } catch (err) {
      if (err instanceof LeaseLostError) this.halt({ kind: "lease-lost" });
      else if (err instanceof WriteConflictError) this.halt({ kind: "failed", error: err });
      else this.halt({ kind: "interrupted", error: err as Error });
    } finally {
      this.active--;
    }
    if (this.halted) return never();
    this.committedAny = true;
    for (const s of write.steps ?? []) addAmounts(this.totalSpent, s.spend);
    for (const a of write.attempts ?? []) addAmounts(this.totalSpent, a.spend);
    this.maybeSuspend();
  }

  private async recordOk<T>(
    key: string,
    seq: number,
    name: string,
    kind: StepKind,
    value: T,
    startedAt: number,
    consume?: RunWrite["consume"],
  ): Promise<T> {
    let encoded: string;
    try {
      encoded = encode(value, this.host.maxPayloadBytes);
    } catch (err) {
      throw new SerializationError(
        `${kind} "${key}" of run "${this.host.runId}": the value ${(err as Error).message}`,
        { cause: err },
      );
    }
    const rec = this.stepRecord(key, seq, name, kind, startedAt, encoded, null, {}, 1);
    await this.commit({ steps: [rec], ...(consume ? { consume } : {}) });
    return decode<T>(encoded);
  }

  private stepRecord(
    key: string,
    seq: number,
    name: string,
    kind: StepKind,
    startedAt: number,
    result: string | null,
    error: ErrorRecord | null,
    spend: Amounts,
    attempt: number,
  ): StepRecord {
    return {
      runId: this.host.runId,
      key,
      seq,
      name,
      kind,
      outcome: error ? "error" : "ok",
      result,
      error,
      spend,
      attempt,
      startedAt,
      completedAt: this.host.clock.now(),
    };
  }

  private intent(key: string, kind: StepKind, name: string, data: unknown): IntentRecord {
    const rec: IntentRecord = {
      runId: this.host.runId,
      key,
      kind,
      name,
      data: encode(data),
      createdAt: this.host.clock.now(),
    };
    this.intents.set(key, rec);
    return rec;
  }
}

/** Thrown synchronously into a workflow by a ctx call made after the execution halted.
 *  Internal control flow: never catch this. */
export class HaltedSignal extends Error {
  constructor() {
    super("cairn: this execution has stopped (never catch this)");
    this.name = "HaltedSignal";
    Object.defineProperty(this, Symbol.for("cairn.halted"), { value: true });
  }
}
