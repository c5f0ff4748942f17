// Ordered delivery: every outcome that reaches workflow code (a step's value or final error,
// a sleep's end, a wait's event or timeout, a child's result) is handed over one at a time,
// each only after the previous one's cascade has finished, on the first run and on every
// replay alike. The first run hands outcomes over in the order their records became durable
// and records that order (StepRecord.delivery); a replay hands the recorded outcomes over in
// that same order, then the new ones. Which branch continues first, which side of a
// Promise.race wins, which call gets `name#2`: all are decided by this order, never by how
// fast a replay happens to find its records.
//
// A cascade is the run of microtasks a hand-over sets off: the continuations of the code
// that awaited the outcome, up to their next await of something not yet settled. It is
// over when the microtask queue is empty, which a process.nextTick queued from inside the
// cascade observes: Node runs ticks only once the microtask queue has drained, and no timer,
// I/O callback or immediate runs in between. So a cascade holds exactly the code the outcome
// made runnable, the same code on every replay; anything the workflow does after awaiting
// a timer or I/O of its own runs later, outside any cascade ("late").

import { outsideWorkflow } from "./call-scope.js";

/** What the queue needs from its owner. */
export interface DeliveryHooks {
  /** A cascade (the start's or a hand-over's) is about to begin. */
  began(): void;
  /** A cascade finished (the start's or a hand-over's): the microtask queue is empty. */
  quiet(): void;
  /** A count of the asynchronous resources (promises, ticks, microtasks) the workflow code
   *  has created: a hand-over waits until a round of ticks and microtasks created none. */
  activity?(): number;
  /** Asked as a cascade ends, before the next recorded outcome is handed over: true when the
   *  cascade left nothing of the workflow code's own in the tick and microtask queues (it
   *  created no tick, microtask, timer, immediate or I/O: promises only, each settled by now or
   *  waiting on a cairn outcome) and its end woke nothing of cairn's (a call waiting for the
   *  cascade's end). The hand-over's round then begins at its last step (see pump). */
  quietTurn?(): boolean;
}

type Settle = () => void;

export class DeliveryQueue {
  /** Outcomes handed over so far: the window a call made now belongs to. */
  released = 0;
  /** Live outcomes handed over so far (not replayed ones). */
  liveReleased = 0;
  /** A cascade (the start's or a hand-over's) is running. */
  inCascade = false;
  /** The position of the outcome whose cascade is running, when that outcome is handed over
   *  in the order (recorded in it, or new): the same turn in every execution. Undefined in
   *  the start's cascade and a free outcome's, whose turn is not. */
  cascadePosition: number | undefined;
  private busy = false;
  /** Recorded positions still to hand over, ascending; `head` indexes the next. */
  private readonly recorded: number[];
  private head = 0;
  /** Recorded positions whose call has been made again: ready to hand over in turn. */
  private readonly waiting = new Map<number, Settle>();
  /** Recorded outcomes outside the order (older records, or a history a resume replaced):
   *  handed over as soon as their call is made. */
  private readonly free: Array<{ settle: Settle; since: number; position: number }> = [];
  /** Positions given to new outcomes, in order; each becomes ready once durable. */
  private readonly live: Array<{ position: number; settle?: Settle; dropped?: boolean }> = [];
  private nextPosition: number;
  private halted = false;
  /** The owner holds the next hand-over back (hold): a cascade's recorded call is missing. */
  private held = false;

  constructor(
    recordedPositions: readonly number[],
    firstNewPosition: number,
    private readonly hooks: DeliveryHooks,
    /** The generation of the record at each recorded position (absent: the oldest). */
    private readonly generationAt: ReadonlyMap<number, number> = new Map(),
  ) {
    this.recorded = [...recordedPositions].sort((a, b) => a - b);
    this.nextPosition = firstNewPosition;
  }

  /** Runs `fn` (the workflow function) as the first cascade. */
  start(fn: () => void): void {
    this.busy = true;
    queueMicrotask(() => {
      this.cascadePosition = undefined;
      this.hooks.began();
      this.inCascade = true;
      fn();
      process.nextTick(() => this.cascadeOver());
    });
  }

  /** The call of the recorded outcome at `position` has been made: hand it over in turn. */
  recordedCalled(position: number, settle: Settle): void {
    this.waiting.set(position, settle);
    this.pump();
  }

  /** A recorded outcome with no place in the order: hand it over as soon as possible.
   *  `since`: the generation whose failure put it out of the order; the first execution
   *  of each later generation handed it over before its own new outcomes (which were live
   *  then), so a replay does too. Infinity: after every recorded outcome that is ready. */
  freeCalled(
    settle: Settle,
    since = Number.POSITIVE_INFINITY,
    position = Number.POSITIVE_INFINITY,
  ): void {
    // Of the free outcomes whose calls have been made, the one the history received first
    // goes first (a race of two calls made together keeps its winner).
    let i = this.free.length;
    while (i > 0 && this.free[i - 1]!.position > position) i--;
    this.free.splice(i, 0, { settle, since, position });
    this.pump();
  }

  /** A place in the order for a new outcome, given before its record is written. */
  allocate(): number {
    const position = this.nextPosition++;
    this.live.push({ position });
    return position;
  }

  /** The new outcome at `position` is durable: hand it over in turn. */
  durable(position: number, settle: Settle): void {
    const entry = this.live.find((e) => e.position === position);
    if (!entry) return;
    entry.settle = settle;
    this.pump();
  }

  /** The outcome at `position` will never be written (its call stopped): skip it. */
  drop(position: number): void {
    const entry = this.live.find((e) => e.position === position);
    if (!entry) return;
    entry.dropped = true;
    this.pump();
  }

  /** Holds the next hand-over back until `release`: the cascade just over recorded a call the
   *  replay has not made yet, which code of the workflow's own work may still make. Handing the
   *  next outcome over meanwhile would let the code it runs make a call of that name first. */
  hold(): void {
    this.held = true;
  }

  /** Hands over again after `hold`. */
  release(): void {
    if (!this.held) return;
    this.held = false;
    this.pump();
  }

  /** True while `hold` holds the hand-overs back. */
  get holding(): boolean {
    return this.held;
  }

  /** Stops handing anything over. */
  halt(): void {
    this.halted = true;
  }

  /** True when nothing is being handed over and nothing is ready to be. */
  get idle(): boolean {
    return !this.busy && this.nextReady() === undefined;
  }

  /** The next recorded outcome to hand over, when its call has not been made yet. */
  get stalledOn(): number | undefined {
    if (this.head >= this.recorded.length) return undefined;
    const position = this.recorded[this.head]!;
    return this.waiting.has(position) ? undefined : position;
  }

  /** Recorded outcomes not handed over yet. */
  get recordedLeft(): number {
    return this.recorded.length - this.head;
  }

  /** The next outcome to hand over (its settle), its place in the order when it has one
   *  (readyPosition) and whether it is new (readyLive); undefined when none is ready. The two
   *  fields rather than an object made per hand-over. */
  private nextReady(): Settle | undefined {
    this.readyLive = false;
    this.readyPosition = undefined;
    if (this.head < this.recorded.length) {
      const position = this.recorded[this.head]!;
      const settle = this.waiting.get(position);
      const free = this.free[0];
      // A free outcome went before an outcome its own generation's executions made live.
      const freeFirst = free !== undefined && (this.generationAt.get(position) ?? -1) > free.since;
      if (settle && !freeFirst) {
        this.readyPosition = position;
        return settle;
      }
      return free?.settle;
    }
    const free = this.free[0];
    if (free) return free.settle;
    while (this.live[0]?.dropped) this.live.shift();
    const first = this.live[0];
    if (!first?.settle) return undefined;
    this.readyLive = true;
    this.readyPosition = first.position;
    return first.settle;
  }
  private readyLive = false;
  private readyPosition: number | undefined;

  /** The outcome being handed over (one at a time: busy), and whether it is new, its place,
   *  and the workflow code's activity count its round compares (pump). */
  private handing: Settle | undefined;
  private handingLive = false;
  private handingPosition: number | undefined;
  private mark = 0;

  private pump(atCascadeEnd = false): void {
    if (this.busy || this.halted || this.held) return;
    const settle = this.nextReady();
    if (!settle) return;
    // Take it out of its queue now, so a pump before the microtask runs cannot pick it again.
    if (
      this.head < this.recorded.length &&
      this.waiting.get(this.recorded[this.head]!) === settle
    ) {
      this.waiting.delete(this.recorded[this.head]!);
      this.head++;
    } else if (this.free[0]?.settle === settle) {
      this.free.shift();
    } else {
      this.live.shift();
    }
    this.busy = true;
    this.handing = settle;
    this.handingLive = this.readyLive;
    this.handingPosition = this.readyPosition;
    // The first run hands a new outcome over only once its record is written (store I/O), so
    // after every tick and microtask the workflow code queued has run: code a timer or I/O of
    // its own resumed (the other side of a Promise.race made late), or a branch living in
    // `process.nextTick` and microtasks. A replay, whose recorded outcome is ready at once,
    // must not overtake that code either. So a hand-over waits for a round (a microtask, a
    // nextTick, which Node runs only once the microtask queue is empty, a microtask again)
    // in which the workflow code created nothing asynchronous; any tick it queued meanwhile
    // would run after that round, and the microtasks it queues after the hand-over. The
    // rounds are cairn's own (outsideWorkflow): they count as none of the workflow's work.
    //
    // A recorded outcome whose turn comes as a cascade ends (cascadeOver, a tick Node runs
    // only once the microtask queue is empty) after a cascade that left nothing of the
    // workflow's own in the queues (quietTurn) starts at the round's last step: the round's
    // first microtask and its tick would run no workflow code (there is none queued to run,
    // and nothing but a hand-over settles what it awaits), and the last step still looks
    // whether the workflow code created anything meanwhile. A replay of 1,000 steps made
    // 2,000 ticks and microtasks fewer. Not for a new outcome: its turn is the first run's.
    // The steps are functions made once (the hand-over's parts are fields, above).
    this.mark = this.hooks.activity?.() ?? 0;
    if (atCascadeEnd && !this.handingLive && this.hooks.quietTurn?.() === true) {
      outsideWorkflow(this.queueLastStep);
    } else outsideWorkflow(this.queueFirstStep);
  }

  private readonly queueFirstStep = (): void => queueMicrotask(this.firstStep);
  private readonly firstStep = (): void => {
    process.nextTick(this.queueLastStep);
  };
  private readonly queueLastStep = (): void => queueMicrotask(this.lastStep);
  private readonly lastStep = (): void => {
    const now = this.hooks.activity?.() ?? this.mark;
    if (now !== this.mark) {
      this.mark = now;
      this.firstStep();
    } else this.handOver();
  };

  private handOver(): void {
    if (this.halted) return;
    const settle = this.handing!;
    this.handing = undefined;
    this.released++;
    if (this.handingLive) this.liveReleased++;
    this.cascadePosition = this.handingPosition;
    this.hooks.began();
    this.inCascade = true;
    settle();
    process.nextTick(this.endOfCascade);
  }

  private readonly endOfCascade = (): void => this.cascadeOver();

  private cascadeOver(): void {
    this.inCascade = false;
    this.busy = false;
    if (this.halted) return;
    this.hooks.quiet();
    this.pump(true);
  }
}
