// Asynchronous work that workflow code started outside any cairn call: a timer, a file read,
// a socket. While some is pending, a branch of the run is busy, not blocked, so the run must
// not suspend yet: it would abandon that branch mid-way, and with only event waits left it
// would never wake to redo it.
//
// An async hook sees each asynchronous resource when it is created, in the scope of the code
// that created it (call-scope.ts, whose hook carries the scopes and tells this file of each
// resource the workflow code creates): a resource created by a run's workflow code is that
// run's late work. cairn's own work (commits, wake-up timers, store reads) runs
// outside any workflow scope (outsideWorkflow) and step bodies in a body scope: neither
// counts. The hook only listens to creations (promises return at once): a destroy hook
// would make Node track every promise's collection, far too costly per step.
//
// So pending is judged when the run is about to suspend: a timer or immediate is pending
// until Node marks it destroyed (fired or cleared), exactly; a socket, pipe, child process,
// UDP socket or worker thread while its handle is open and ref'd (handle-work.ts); any other resource (fs,
// DNS, a connect request) counts for a grace period after its creation, long enough for a
// file read (and a few event-loop turns, which a blocked loop holds back: OTHER_WORK_TURNS).
// A suspension waits for handles only for that grace (holdsRunForMs): a branch that awaits
// longer network I/O outside a step may still be abandoned by it and redone when the run
// wakes: I/O belongs in steps.

import { executionAsyncResource } from "node:async_hooks";
import { onWorkflowResource, outsideWorkflow, scopeHook } from "./call-scope.js";
import { type HandleLike, handleProgress, handleState, workHandleOf } from "./handle-work.js";

/** A resource Node marks `_destroyed` once it has fired or was cleared. */
interface TimerLike {
  _destroyed?: boolean;
  /** False once unref'd (AbortSignal.timeout's timer is from the start). */
  hasRef?: () => boolean;
}

/** A point of an execution's cascades (delivery.ts): the same point of the run's calls in
 *  every execution. */
export interface CascadePoint {
  /** The execution's call count there. */
  readonly seq: number;
  /** The position of the outcome whose hand-over began that cascade, when it is handed over
   *  in the order (DeliveryQueue.cascadePosition): every outcome of a lower position was
   *  handed over before it, so its call had been made. */
  readonly position: number | undefined;
}

/** Where a resource of a run's workflow code was created (see `placeOfCurrentFlow`): a point
 *  of its run's cascades that precedes the creation. */
interface Place extends CascadePoint {
  /** The execution (Context) whose workflow code created it. */
  readonly owner: object;
}

const PLACE = Symbol("cairn.place");

/** Marks a resource created by the callback of an unref'd timer (or by code that ran from such
 *  a resource): work its code said must not keep the process alive. */
const UNREFD = Symbol("cairn.unrefd");

/** Whether code running from `from` runs from an unref'd timer's callback: `from` is such a
 *  timer (a Timeout: an unref'd setInterval's I/O every tick), or was created from one. */
function ofUnrefdTimer(from: unknown): boolean {
  if (from === null || typeof from !== "object") return false;
  if ((from as { [UNREFD]?: true })[UNREFD] === true) return true;
  const t = from as TimerLike & { _onTimeout?: unknown };
  return t._onTimeout !== undefined && typeof t.hasRef === "function" && t.hasRef() === false;
}

/** Event-loop turns (each with its I/O poll) a file read may take: other work counts as
 *  pending for its grace and at least this many turns, so a loop blocked or starved while it
 *  ran (a long synchronous stretch, a loaded machine) does not end its grace early: a replay
 *  would judge the call that follows it missing (NonDeterminismError) while it is on its way. */
const OTHER_WORK_TURNS = 8;

/** The late work of one execution's workflow code. */
export class LateWork {
  /** The point of the execution's cascade running now (a fixed point of its code: ordered
   *  delivery, delivery.ts); undefined outside its cascades. */
  constructor(private readonly fixedPoint: () => CascadePoint | undefined = () => undefined) {}
  /** The last place given out (the point does not change within a stretch of code). */
  private lastPlace: Place | undefined;

  /** The place of code of `owner` running now inside one of its cascades, if it is. */
  fixedPlace(owner: object): Place | undefined {
    const point = this.fixedPoint();
    if (point === undefined) return undefined;
    const last = this.lastPlace;
    if (last?.seq !== point.seq || last.position !== point.position) {
      this.lastPlace = { owner, seq: point.seq, position: point.position };
    }
    return this.lastPlace;
  }

  /** Asynchronous resources the workflow code created (promises included): delivery.ts
   *  hands an outcome over only after a round of ticks and microtasks that created none. */
  created = 0;
  /** Of those, the ones that are no promise: a tick, a microtask, a timer, an immediate, I/O
   *  (delivery.ts: a cascade that made none leaves nothing of its own in the queues). */
  createdOther = 0;

  private readonly timers: Array<WeakRef<TimerLike>> = [];
  /** Sockets, pipes, child processes (handle-work.ts): pending while open and ref'd. */
  private readonly handles: Array<WeakRef<HandleLike>> = [];
  /** Each handle's progress (handleProgress) when prune last looked: made with the first. */
  private progress: WeakMap<HandleLike, string> | undefined;
  private lastOtherAt = Number.NEGATIVE_INFINITY;
  /** As lastOtherAt, for work not begun from an unref'd timer (holdsRunForMs). */
  private lastHoldingAt = Number.NEGATIVE_INFINITY;
  /** A timer fired (or was cleared), a handle closed or other work started since
   *  `takeActivity`. */
  private activity = false;

  note(type: string, resource: object): void {
    this.createdOther++;
    if (type === "Timeout" || type === "Immediate") {
      this.timers.push(new WeakRef(resource as TimerLike));
    } else if (type !== "TickObject" && type !== "Microtask") {
      const handle = workHandleOf(type, resource);
      if (handle !== undefined) {
        this.handles.push(new WeakRef(handle));
        this.progress ??= new WeakMap();
        this.progress.set(handle, handleProgress(handle));
      }
      this.lastOtherAt = performance.now();
      if ((resource as { [UNREFD]?: true })[UNREFD] !== true) this.lastHoldingAt = this.lastOtherAt;
      this.activity = true;
      this.countTurns();
    }
  }

  /** Event-loop turns since other work last began (see OTHER_WORK_TURNS). */
  private turns = OTHER_WORK_TURNS;
  private counting: NodeJS.Immediate | undefined;

  private countTurns(): void {
    this.turns = 0;
    if (this.counting !== undefined) return;
    const turn = () => {
      this.turns++;
      this.counting = this.turns < OTHER_WORK_TURNS ? setImmediate(turn) : undefined;
      this.counting?.unref?.();
    };
    // Outside the scope: cairn's own counting is no late work of the run.
    this.counting = outsideWorkflow(() => setImmediate(turn));
    this.counting.unref?.();
  }

  /**
   * How long (ms) the workflow code's work keeps its run from suspending: as `busyForMs`, but
   * an unref'd timer does not count. Its code said it must not keep a process alive, and
   * `AbortSignal.timeout` (the AI SDK's `timeout.toolMs`, one per tool call) makes such a
   * timer: counted, a run holding one while it waits for an event would hold its worker slot
   * for the timer's whole span. A branch that awaits one may be abandoned by a suspension
   * and redone when the run wakes, as one awaiting long network I/O is. Nor does an open
   * handle past its grace: a request to a server that never answers (the losing side of a
   * race) would hold the run's worker slot for good. Nor does other work (a file read) begun
   * by an unref'd timer's callback: an unref'd setInterval that reads a file every tick held
   * its run for ever. The replay's checks (`busyForMs`) still count all of them: they wait
   * at most replayStallMs, and only ever laxer.
   */
  holdsRunForMs(graceMs: number): number {
    this.prune();
    for (const ref of this.timers) {
      if (ref.deref()?.hasRef?.() !== false) return Math.min(graceMs, 50);
    }
    // Work begun from an unref'd timer was the last: only what began before it holds.
    if (this.lastHoldingAt < this.lastOtherAt) {
      const since = performance.now() - this.lastHoldingAt;
      return since < graceMs ? Math.ceil(graceMs - since) : 0;
    }
    return this.otherPendingMs(graceMs);
  }

  /** A handle of the workflow code is open and ref'd (prune dropped the closed ones). */
  private handleOpen(): boolean {
    for (const ref of this.handles) {
      const h = ref.deref();
      if (h !== undefined && handleState(h) === "working") return true;
    }
    return false;
  }

  /** What of the workflow code's own work is still pending, in words for an error (busyForMs
   *  says whether any is): a refusal made while a kept connection holds the replay must say
   *  so, not only speak of timers. */
  describePending(graceMs: number): string | undefined {
    this.prune();
    const kinds: string[] = [];
    if (this.timers.length > 0) kinds.push("a timer");
    if (this.handleOpen()) {
      kinds.push(
        "an open, ref'd socket, pipe, child process or worker thread (a client or thread the workflow code keeps open counts for as long as it is open: make it outside the workflow code or in a step, or unref it)",
      );
    }
    if (this.otherPendingMs(graceMs) > 0) kinds.push("I/O begun within the last second");
    return kinds.length > 0 ? kinds.join("; ") : undefined;
  }

  /** Other work may still be pending: started within the grace, or fewer loop turns ago
   *  than a file read takes (a loop blocked meanwhile let it finish no sooner). */
  private otherPendingMs(graceMs: number): number {
    // The clock is read only when other work ever began (every hand-over asks).
    if (this.lastOtherAt !== Number.NEGATIVE_INFINITY) {
      const since = performance.now() - this.lastOtherAt;
      if (since < graceMs) return Math.ceil(graceMs - since);
    }
    return this.turns < OTHER_WORK_TURNS ? 1 : 0;
  }

  /** How long (ms) the workflow code may still be busy: 0 when nothing it started is
   *  pending; else when to look again. */
  busyForMs(graceMs: number): number {
    this.prune();
    if (this.timers.length > 0 || this.handleOpen()) return Math.min(graceMs, 50);
    return this.otherPendingMs(graceMs);
  }

  /**
   * True when, since the last call, a timer of the workflow code fired (or was cleared), a
   * handle of it closed or moved bytes, or it started other work, or other work may still be
   * running. Code that joins such work with a cairn outcome (a Promise.all of a step and a
   * file read) runs in whichever cascade finds both done, which timing decides: the calls
   * it makes have no fixed window, and a name they share is judged by the call tree alone
   * (context.ts, madeAfter). So a handle counts here only when its callbacks ran (it
   * closed, or moved bytes), not for being open: a client connection the workflow keeps
   * for the run's life (a database's, made outside a step) is open and ref'd in every
   * cascade, and made every call of the run one of no fixed window, refusing a name reused
   * after I/O on the first run (replay-kept-connection-findings).
   */
  takeActivity(graceMs: number): boolean {
    this.prune();
    // Other work's end is not observed (see the header): it counts while it may be pending.
    const a = this.activity || this.otherPendingMs(graceMs) > 0;
    this.activity = false;
    return a;
  }

  private prune(): void {
    for (let i = this.timers.length - 1; i >= 0; i--) {
      const t = this.timers[i]!.deref();
      if (t === undefined || t._destroyed === true) {
        this.timers.splice(i, 1);
        this.activity = true;
      }
    }
    for (let i = this.handles.length - 1; i >= 0; i--) {
      const h = this.handles[i]!.deref();
      const state = h === undefined ? "closed" : handleState(h);
      if (state === "closed" || state === "stdio") {
        this.handles.splice(i, 1);
        // A closed handle's callbacks ran: code that joined its work may have run.
        if (state === "closed") this.activity = true;
        continue;
      }
      // So did those of one that read, wrote, or was unref'd since the last look.
      const now = handleProgress(h!);
      if (now !== this.progress?.get(h!)) {
        this.progress?.set(h!, now);
        this.activity = true;
      }
    }
  }
}

const tracked = new Map<object, LateWork>();

/**
 * Places. Every asynchronous resource the workflow code creates (a promise an `await` makes,
 * a timer, a file read) is marked with a point of its run's cascades that precedes its
 * creation: the cascade's point (call count, and the position of the outcome whose hand-over
 * began it) when it was created inside a cascade, else the mark of the resource whose
 * callback (or continuation) is creating it. Code that runs from a resource (the
 * continuation of an `await`, a timer's callback) runs after the resource was created, so
 * after that point; and code inside a cascade runs at the same point of the run's calls in
 * every execution (delivery.ts). So a call of the name made at that point or before it, or
 * whose outcome was handed over there or before, comes before the code, in every execution,
 * whatever the code awaited since: what lets a late call reuse a name made before a join
 * (`await Promise.all(branches)`), or by an earlier call of a helper that awaits I/O before
 * its call, which the call tree (call-scope.ts) cannot see (context.ts, beginCall).
 */
function placeOf(resource: unknown): Place | undefined {
  return (resource as { [PLACE]?: Place } | null | undefined)?.[PLACE];
}

/** The mark of the code running now, for `owner`'s workflow code: undefined when unknown. */
export function placeOfCurrentFlow(owner: object): CascadePoint | undefined {
  const place = placeOf(executionAsyncResource());
  return place?.owner === owner ? place : undefined;
}

// call-scope.ts's hook, which carries the scopes, tells of each resource the workflow code
// creates (one hook for both: see there).
onWorkflowResource((owner, type, resource, from) => {
  const work = tracked.get(owner);
  if (work === undefined) return;
  work.created++;
  if (ofUnrefdTimer(from)) (resource as { [UNREFD]?: true })[UNREFD] = true;
  if (type !== "PROMISE") work.note(type, resource);
  const place = work.fixedPlace(owner) ?? placeOf(from);
  if (place !== undefined && place.owner === owner) {
    (resource as { [PLACE]?: Place })[PLACE] = place;
  }
});
const hook = scopeHook;
/** The hook stays on a moment after the last run stops: turning promise hooks on and off
 *  costs more than an executed step, and runs that follow one another would pay it twice
 *  each. While on with nothing tracked, it only carries scopes. */
let disableTimer: NodeJS.Timeout | undefined;
const DISABLE_AFTER_MS = 1_000;
/** When (performance.now()) the last run stopped, leaving none tracked. One timer looks at
 *  it: runs that follow one another set no timer each (a timer set and cleared per run
 *  showed in a profile of 0-step runs). */
let idleSince = 0;

/** Turns the hook off once no run has been tracked for DISABLE_AFTER_MS. */
function disableWhenIdle(ms: number): void {
  // Outside the scope: the timer must not hold the stopped run's context for its wait.
  disableTimer = outsideWorkflow(() =>
    setTimeout(() => {
      disableTimer = undefined;
      if (tracked.size > 0) return; // its stop sets the timer again
      const idleMs = performance.now() - idleSince;
      if (idleMs >= DISABLE_AFTER_MS) hook.disable();
      else disableWhenIdle(DISABLE_AFTER_MS - idleMs);
    }, ms),
  );
  // A setTimeout that answers a number (a shim) has no unref: halt() must not throw.
  disableTimer.unref?.();
}

/** Counts the late work of `owner`'s workflow code until `stop()`. */
export function trackLateWork(
  owner: object,
  fixedPoint?: () => CascadePoint | undefined,
): { work: LateWork; stop: () => void } {
  // enable() and disable() are no-ops when already in that state.
  hook.enable();
  const work = new LateWork(fixedPoint);
  tracked.set(owner, work);
  return {
    work,
    stop: () => {
      if (tracked.get(owner) !== work) return;
      tracked.delete(owner);
      if (tracked.size > 0) return;
      idleSince = performance.now();
      if (disableTimer === undefined) disableWhenIdle(DISABLE_AFTER_MS);
    },
  };
}
