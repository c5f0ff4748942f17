// A crashed worker's attempts count: a run taken over from a worker that died charges each
// call the crash cut one lost attempt (WORKER_LOST), so a step that keeps killing its
// process fails after maxAttempts instead of looping for ever. The calls cut are the ones
// the replay makes again before any new outcome is handed over, unless one was waiting out
// a backoff (nothing of it ran). What this execution asked and recorded also decides
// whether a hand-back leaves the crash for the next claimer to charge (unjudged).

import type { AttemptRecord } from "../store/store.js";

export class CrashCharges {
  /** The lost attempt asked for each call the crash cut (chargeIfCut), by key: made at the
   *  first (only a run taken from a crashed worker asks any). */
  private asked: Map<string, number> | undefined;
  /** How many of `asked` are recorded: a charge asked but not yet written (the write may
   *  fail) leaves the crash unjudged. */
  private recorded = 0;
  /** This execution recorded a failed attempt of its own: the journal then says where each
   *  call it made again stands, and a hand-back leaves no crash to charge. */
  private attemptRecordedHere = false;
  /** This replay found a call the crash left in its backoff (no attempt of it cut). */
  private foundInBackoff = false;

  constructor(
    /** The run was taken from a crashed worker. */
    private readonly recovered: boolean,
    /** How many new outcomes this execution has handed over. */
    private readonly liveReleased: () => number,
    private readonly now: () => number,
  ) {}

  /** Whether chargeIfCut may charge any call now (it has no other effect). */
  get mayCharge(): boolean {
    return this.recovered && this.liveReleased() === 0;
  }

  /** Whether call `key`, about to be attempted with `prior` attempts recorded, was in
   *  flight when the worker died: then it is charged one lost attempt (asked here, written
   *  by the caller, which says so with `chargeRecorded`). */
  chargeIfCut(key: string, prior: readonly AttemptRecord[]): boolean {
    if (!this.recovered || this.liveReleased() > 0) return false;
    if (this.asked?.has(key)) return false;
    const last = prior.at(-1);
    if (last?.retryAt != null && last.retryAt > this.now()) {
      this.foundInBackoff = true;
      return false;
    }
    this.asked ??= new Map();
    this.asked.set(key, prior.length + 1);
    return true;
  }

  /** A lost attempt asked by chargeIfCut is durable. */
  chargeRecorded(): void {
    this.recorded++;
  }

  /** This execution recorded a failed attempt of its own. */
  attemptRecorded(): void {
    this.attemptRecordedHere = true;
  }

  /** A run taken from a crashed worker whose replay has not yet judged what the crash cut:
   *  handed back, its next claimer must charge the crash. */
  get unjudged(): boolean {
    return (
      this.recovered &&
      this.liveReleased() === 0 &&
      // A call the crash found in its backoff, attempted here and failed again, is in its
      // next backoff now: handed back as the crash left the run, its next claimer would
      // charge a lost attempt that never began (missing a charge is the lesser harm).
      !this.attemptRecordedHere &&
      // Likewise a call found in its backoff and not attempted since (close() came during
      // it): its next claimer, past that backoff, would charge it an attempt never begun.
      (this.asked === undefined || this.asked.size === 0
        ? !this.foundInBackoff
        : this.recorded < this.asked.size)
    );
  }

  /** Lost attempts asked without hearing that they were recorded: their writes may have
   *  landed all the same (the execution halted before the answer, whose write the close()
   *  drain landed; a lost COMMIT), so the journal must say (execution.ts). */
  get unconfirmed(): ReadonlyArray<{ key: string; attempt: number }> {
    if (this.asked === undefined || this.recorded === this.asked.size) return [];
    return [...this.asked].map(([key, attempt]) => ({ key, attempt }));
  }
}
