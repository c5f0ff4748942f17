// The held hand-over of the replay cursor (context.ts). At a cascade's end the recorded
// outcomes are held back (DeliveryQueue.hold) while a call recorded inside that cascade has
// not been made again and the workflow's own work (a timer, a file) may still make it; and
// while a late call took a record (or an intent) made inside the held cascade and may be
// another call of its name, come early from a race its own timer won (a doubtful call).
// This file keeps that hold's state, decides at each cascade's end whether the hold goes on,
// ends, or is refused (past replayStallMs with that work still pending), and keeps the
// waiters for that verdict: new calls (beforeExecute) and the function's end (finishWith).
// The Context keeps the loops that await here, so no await moved: tick order is the
// replay's (a moved await can change the order outcomes are handed over in).

import { NonDeterminismError } from "../errors.js";
import { realDelay } from "../lib/timers.js";
import { outsideWorkflow } from "./call-scope.js";
import type { DeliveryQueue } from "./delivery.js";
import type { JournalIndex } from "./journal-index.js";
import { intentIssuedLate, intentWindow } from "./records.js";

/** What the hold reads of the run and may do to it (context.ts). */
export interface HeldHost {
  readonly host: { readonly runId: string; readonly replayStallMs: number };
  readonly delivery: DeliveryQueue;
  readonly journal: JournalIndex;
  /** How long (ms) the workflow's own work may still make calls (0: none pending). */
  busyForMs(): number;
  /** What of the workflow's own work is pending, in words (undefined: nothing known). */
  describePending(): string | undefined;
  halted(): boolean;
  /** Halted, draining or finishing: a wait for the workflow's own work gives up. */
  stopped(): boolean;
  fail(error: Error): void;
  /** The end-of-cascade check, looked at again (its verdict is settle's). */
  cascadeOver(): void;
}

export class HeldHandover {
  /** A call made after the workflow's own work took a record made inside a cascade while the
   *  hand-overs were held (doubtfulCall). */
  private lateTookHeldRecord = false;
  /** The first such call's key (lateTookHeldRecord), named when its verdict never comes. */
  private lateHeldKey: string | undefined;
  /** A divergence check postponed while the workflow's own work is pending. */
  private windowRecheck: NodeJS.Timeout | undefined;
  /** When the pending divergence check was first postponed. */
  private windowDeferredSince: number | undefined;
  /** Who waits for the next verdict: new calls while the replay is stalled or a doubtful
   *  call holds the hand-overs (beforeExecute), the function's end (finishWith). */
  private waiters: Array<() => void> = [];

  constructor(private readonly run: HeldHost) {}

  /** While the hand-overs are held for a missing call, a call of its name made after the
   *  workflow's own work took its record (one made inside a cascade). It may be that call,
   *  made late; or another call of the name, from code whose own timer won a race (the first
   *  run's outcome won it) and that came early, before the missing one: the replay of this
   *  record would hand it another call's value, and the code it runs could record or perform
   *  with it before the missing one comes. Whether a later call of the name has a record
   *  tells nothing: the journal may end before it (a crash right after the missing call's
   *  record). So keep holding while the workflow's own work may still make calls (at most
   *  replayStallMs): another call of that name made meanwhile is refused (the reused-name
   *  check of a late call's neighbour, late-call-check.ts, or Context.matchRecord's of a
   *  call made before its window) with
   *  nothing handed over. The code the held outcomes run makes its calls after them in
   *  every execution; only code the workflow's own work resumes can come meanwhile. */
  doubtfulCall(): boolean {
    return this.lateTookHeldRecord && this.run.journal.exactWindows;
  }

  /** Whether `key` holds an intent written inside the cascade of the window the hand-overs
   *  are held at now (its call is missing there: Context.missingCall). */
  takesHeldIntent(key: string): boolean {
    const { delivery, journal } = this.run;
    if (!delivery.holding || !journal.exactWindows) return false;
    const intent = journal.intents.get(key);
    return intent !== undefined && intentWindow(intent)?.issuedAfter === delivery.released;
  }

  /** Whether `key` holds a begun call's intent, written by a call made inside a cascade. */
  intentFromCascade(key: string): boolean {
    const journal = this.run.journal;
    const intent = journal.intents.get(key);
    return intent !== undefined && journal.exactWindows && !intentIssuedLate(intent);
  }

  /** A recorded call was made while the hand-overs are held; `late` when it was made after
   *  the workflow's own work and took a record made inside a cascade (doubtfulCall). */
  recordTaken(key: string, late: boolean): void {
    if (late) {
      if (!this.lateTookHeldRecord) this.lateHeldKey = key;
      this.lateTookHeldRecord = true;
    }
    this.recheckHeldSoon();
  }

  /** A late call took an intent written inside the held cascade (takesHeldIntent): as a
   *  late call that takes a held record, it may be another call of the name, come early;
   *  the hand-overs stay held while the workflow's own work may make the one that began
   *  there. */
  intentTaken(): void {
    this.lateTookHeldRecord = true;
    this.recheckHeldSoon();
  }

  /** Resolves once no work of the workflow's own is pending (at most replayStallMs), or the
   *  execution stops. */
  async ownWorkOver(): Promise<void> {
    const since = performance.now();
    for (;;) {
      if (this.run.stopped()) return;
      const busyMs = this.run.busyForMs();
      const left = this.run.host.replayStallMs - (performance.now() - since);
      if (busyMs === 0 || left <= 0) return;
      await outsideWorkflow(() => realDelay(Math.min(left, busyMs)));
    }
  }

  /** The hold's verdict at a cascade's end, `missing` when a call recorded inside it was
   *  not made again: true when nothing holds the hand-overs any more; false when they stay
   *  held (looked at again later) or the run was refused. */
  settle(missing: boolean): boolean {
    const waitFor = missing || this.doubtfulCall();
    // Postponed at most replayStallMs (real time, like the stall timer): a timer the code
    // never clears (an interval) must not hold a divergence back for ever.
    if (!waitFor) this.windowDeferredSince = undefined;
    else this.windowDeferredSince ??= performance.now();
    if (
      waitFor &&
      performance.now() - (this.windowDeferredSince ?? 0) < this.run.host.replayStallMs &&
      this.run.busyForMs() > 0
    ) {
      // Code that joined a cairn outcome with work of its own (a Promise.all of a step and a
      // timer) makes its next call once that work is done, which on a replay may be later
      // than the first time. Look again then; new calls wait for the verdict, and so does the
      // next outcome: code it runs could make a call of the missing one's name first and take
      // its record.
      this.run.delivery.hold();
      this.recheckWindowLater();
      return false;
    }
    // Out of time with the workflow's own work still pending: the held record's own call may
    // yet come, and the late call that took it may be another of its name whose timer won a
    // race. Handing the record over would hand it that call's value (and the replay's later
    // checks take the two for calls of cascades apart): refused instead.
    if (this.doubtfulCall() && this.run.busyForMs() > 0) {
      const key = this.lateHeldKey ?? "?";
      const { runId, replayStallMs } = this.run.host;
      const pending = this.run.describePending();
      const pendingText = pending === undefined ? "" : ` Still pending: ${pending}.`;
      this.run.fail(
        new NonDeterminismError(
          `Run "${runId}" no longer matches its journal: the call keyed "${key}" was made after work of the workflow's own (a timer, a file) and took a record made inside the code an outcome ran, and that work was still pending after ${replayStallMs} ms (replayStallMs), so cairn cannot tell whether that record is this call's or another call's of its name still to come (code that raced a cairn call against its own timer, Promise.race, took the other side this time). Make the race's outcome a recorded one (a step's timeout, ctx.waitForEvent's timeout, ctx.sleep in the race), or give each call its own name.${pendingText}`,
          { runId, key },
        ),
      );
      return false;
    }
    this.lateTookHeldRecord = false;
    // The hold is over: a later hold counts its replayStallMs from its own start. (A doubtful
    // hold ends with waitFor still true: left set, the next cascade's hold for a call the
    // workflow's own work delays found its time spent, and refused a correct program.)
    this.windowDeferredSince = undefined;
    return true;
  }

  /** Resolves at the next verdict (wakeWaiters). Not async: the caller's await of it takes
   *  the ticks it took when the promise was made in place. */
  nextVerdict(): Promise<void> {
    return new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  /** A verdict came (a cascade's end), or the execution halts or drains: waiters look again.
   *  True when there were any. */
  wakeWaiters(): boolean {
    const waiting = this.waiters;
    if (waiting.length === 0) return false;
    this.waiters = [];
    for (const w of waiting) w();
    return true;
  }

  /** The execution halted: no recheck runs. */
  stop(): void {
    if (this.windowRecheck) clearTimeout(this.windowRecheck);
  }

  private recheckWindowLater(): void {
    if (this.windowRecheck !== undefined) return;
    const busyMs = Math.max(1, this.run.busyForMs());
    this.windowRecheck = outsideWorkflow(() =>
      setTimeout(() => {
        this.windowRecheck = undefined;
        const delivery = this.run.delivery;
        // Held (hold): the next outcome is ready but waits for this verdict.
        if (!this.run.halted() && (delivery.holding || delivery.idle)) this.run.cascadeOver();
      }, busyMs),
    );
    this.windowRecheck.unref?.();
  }

  /** A recorded call was made while the hand-overs are held: perhaps the missing one, so the
   *  next outcome need not wait for the recheck's timer (up to a second of the work's grace). */
  private recheckHeldSoon(): void {
    if (this.windowRecheck === undefined) return;
    clearTimeout(this.windowRecheck);
    this.windowRecheck = undefined;
    outsideWorkflow(() =>
      setImmediate(() => {
        if (!this.run.halted() && this.run.delivery.holding) this.run.cascadeOver();
      }),
    );
  }
}
