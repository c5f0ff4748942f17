// The reused-name check of the replay cursor (context.ts): whether a call made now comes
// after the earlier call of its name in every execution, when one of the two was made late
// (after an `await` of something that is no cairn call). It judges by what the delivery
// order fixes, the same on every execution: the windows of the cascades the calls' records
// were made in (recordedWindow), where each call's outcome was handed over in the order
// (handedOverAt), and the point of the cascade that runs now. It only reads the run's state
// and keeps its own; the Context fails the run with the error it returns. No await here:
// the check runs inside beginCall, in the tick the call is made.

import { NonDeterminismError } from "../errors.js";
import type { StepKind, StepRecord } from "../store/store.js";
import { type CallNode, isAncestor } from "./call-scope.js";
import type { DeliveryQueue } from "./delivery.js";
import type { JournalIndex } from "./journal-index.js";
import { type CascadePoint, placeOfCurrentFlow } from "./late-work.js";

/** What the check reads of the run (context.ts). */
export interface LateCallHost {
  readonly runId: string;
  readonly delivery: DeliveryQueue;
  readonly journal: JournalIndex;
  /** The execution's call count now. */
  seq(): number;
  /** The execution that owns the workflow code's places (late-work.ts). */
  readonly owner: object;
}

/** One call made now, as beginCall sees it before anything of it is kept. */
export interface NewCall {
  kind: StepKind;
  name: string;
  late: boolean;
  record: StepRecord | undefined;
  recordedWindow: number | undefined;
  parent: CallNode | undefined;
}

/** Whether a call made now (made late when `late`) and `prev`, the latest call of its name,
 *  may stand in an order only timing decides: one of the two was made late. Only such a pair
 *  is judged (reusedName); most calls reuse a name, so the call preamble asks this first. */
export function eitherLate(prev: CallNode, late: boolean): boolean {
  return prev.late || late;
}

export class LateCallCheck {
  /** The position of each call's outcome handed over in the order (madeAfter). */
  private readonly handedOverAt = new Map<string, number>();
  private lastCascadePoint: CascadePoint | undefined;

  constructor(private readonly run: LateCallHost) {}

  /** The divergence of a call that reuses the name of `prev` (the latest call of it) in an
   *  order only timing decides; undefined when the call may go on. */
  reusedName(prev: CallNode, c: NewCall): NonDeterminismError | undefined {
    // A late call is not judged by windows after a `prev` that took a held record late: that
    // record may be this call's own, taken by `prev` from a race its timer or I/O won, and
    // handed over once the hold ended (the workflow's own work looked done: a request past
    // the grace); this call then takes `prev`'s record, of a later window (test/replay-held-network-swap-findings.test.ts).
    const trusted = c.late && prev.tookHeldRecord === true ? undefined : c.recordedWindow;
    if (
      eitherLate(prev, c.late) &&
      !inRecordedCascadesApart(prev, trusted) &&
      !isAncestor(prev, c.parent) &&
      !this.madeAfter(prev, c.late && c.record?.issuedLate === true, trusted)
    ) {
      return new NonDeterminismError(
        `Run "${this.run.runId}" calls ${c.kind} "${c.name}" again, and cairn cannot tell that this call always comes after the one keyed "${prev.key}": one of them is made after awaiting something that is not a cairn call (a timer, a file, a fetch), and this one is not made by code that continues from the earlier one (it is in a concurrent branch, or in a helper function that awaited something before making the call), so a replay could give each the other's result. Give each call its own name, e.g. ${ownNameExample(c.kind, c.name)}, or make the call before the helper's own await, or do that I/O inside a step.`,
        { runId: this.run.runId, key: prev.key },
      );
    }
    return undefined;
  }

  /** Whether a call made now comes after `prev` in every execution, though it does not
   *  continue from it (one of the two was made late). The code making this call runs in a
   *  cascade, or from an `await` (or a timer, a file read) it began inside one (late-work.ts,
   *  places): a point fixed in the order of the run's calls, the same on every execution.
   *  `prev` comes first when its outcome was handed over at or before that point (it was
   *  made before its outcome could be: a helper that reads a file then makes the call, run
   *  again from the code its result continues), or when `prev` was itself made inside a
   *  cascade before that point: the code after `await Promise.all(branches)` that reads a
   *  file, then reuses a name the branches used. For the latter, a call made late is never
   *  such a `prev`: its place is timing's (but see heldWindow); nor one made in a cascade
   *  that may continue work of the workflow's own (`Promise.all` of a step and a file read
   *  runs in that cascade only when the read was done first, else late). */
  private madeAfter(
    prev: CallNode,
    replayingLate: boolean,
    recordedWindow: number | undefined,
  ): boolean {
    const delivery = this.run.delivery;
    // Both judgements below depend on timing: whether a cascade may continue work of the
    // workflow's own (a timer fired, a file read begun within the last second), and where
    // code joined with such work runs (in the cascade that found it done, or late, with the
    // place of its join). A replay, faster, judges otherwise and refused the run its first
    // execution recorded. When both calls replay records of their own kinds (`prev`'s made
    // inside a cascade, this one's late), the first run made this very pair (a name's calls
    // are numbered in order) and its check let it through; a replay that made the two in
    // another order would make one with the other's record, of the other kind, and be
    // checked as on a first run.
    if (replayingLate && prev.replayedInCascade) return true;
    // `prev` took a record or intent made inside the cascade held for it (Context.beginCall): it was
    // made before the next hand-over, as its first run made it inside that cascade; a call
    // made inside a later cascade follows it in every execution. (A late call is not judged
    // so: `prev` may be an impostor come early, h11-held-network-swap.)
    if (
      delivery.inCascade &&
      prev.heldWindow !== undefined &&
      delivery.released > prev.heldWindow
    ) {
      return true;
    }
    // A late call that replays a record made inside the cascade of the window it is made in
    // is code of that cascade, which the replay found its join with the workflow's own work
    // unfinished: the first run judged it at that cascade's point, and so does this one (by
    // the delivery order alone: whether a cascade continued such work is timing).
    if (recordedWindow !== undefined && !delivery.inCascade) {
      const position = delivery.cascadePosition;
      if (this.handedOverBefore(prev, { seq: this.run.seq(), position })) return true;
    }
    const point = delivery.inCascade ? this.cascadePoint() : placeOfCurrentFlow(this.run.owner);
    if (point === undefined) return false;
    if (this.handedOverBefore(prev, point)) return true;
    return prev.fixed && prev.seq < point.seq;
  }

  /**
   * On a replay, the window of the cascade `record` was made in, when a call made now (in a
   * cascade or late) takes it after as many hand-overs as its first run had made. Whether
   * code joined with work of the workflow's own (a `Promise.all` of a step and a file read)
   * runs in the cascade that finds both done or late is timing: a replay, whose recorded
   * outcomes are ready at once, finds the read unfinished where the first run found it done.
   * Such code is still that cascade's: no hand-over comes before the calls recorded inside
   * the cascade before it are made again (Context.cascadeOver holds it back), so a call made in that
   * window, late or not, is made where its first run made it, after every earlier window's.
   */
  recordedWindowOf(record: StepRecord | undefined): number | undefined {
    if (record === undefined || record.issuedLate || !this.run.journal.exactWindows) {
      return undefined;
    }
    const window = record.issuedAfter;
    return window !== null && window === this.run.delivery.released ? window : undefined;
  }

  /** True when `prev`'s outcome was handed over in the order at or before the hand-over
   *  that began `point`'s cascade. A call is made before its outcome is handed over, and
   *  the outcomes in the order are handed over in it in every execution, so `prev` is made
   *  before code running from that point, in every execution: however late `prev` was
   *  made (after a file read in a branch, in a helper that awaited I/O), and however
   *  late this code makes its call. */
  private handedOverBefore(prev: CallNode, point: CascadePoint): boolean {
    const handed = this.handedOverAt.get(prev.key);
    return handed !== undefined && point.position !== undefined && handed <= point.position;
  }

  /** The point of the cascade running now; undefined outside the cascades. */
  cascadePoint(): CascadePoint | undefined {
    const delivery = this.run.delivery;
    if (!delivery.inCascade) return undefined;
    const seq = this.run.seq();
    const position = delivery.cascadePosition;
    // The same point while it holds: late-work.ts asks for it at every asynchronous
    // resource the workflow code creates (each promise of an await).
    const last = this.lastCascadePoint;
    if (last?.seq === seq && last.position === position) return last;
    this.lastCascadePoint = { seq, position };
    return this.lastCascadePoint;
  }

  /** Notes that `key`'s outcome is being handed over (in the order, or not: then nothing). */
  noteHandedOver(key: string): void {
    const position = this.run.delivery.cascadePosition;
    if (position !== undefined) this.handedOverAt.set(key, position);
  }
}

/** On a replay, `prev` and a call taking a record of `recordedWindow` were both made inside
 *  cascades by the first run, in two of them, `prev` in the earlier, and are made in those
 *  windows again (recordedWindowOf): their order is the delivery order's, whichever of them
 *  the replay made late, as it was on the first run, which checked nothing. */
function inRecordedCascadesApart(prev: CallNode, recordedWindow: number | undefined): boolean {
  return (
    recordedWindow !== undefined &&
    prev.recordedWindow !== undefined &&
    prev.recordedWindow < recordedWindow
  );
}

/** How to give a call of `name` a name of its own, as code to write. ctx.now/random/uuid
 *  take a label, which cairn keys "@uuid:<label>": the key with ":${item.id}" added was
 *  offered, and a label starting with "@" is refused (isCallName). */
function ownNameExample(kind: StepKind, name: string): string {
  const internal = `@${kind}`;
  if (name === internal) return `ctx.${kind}(\`item:\${item.id}\`)`;
  if (name.startsWith(`${internal}:`)) {
    return `ctx.${kind}(\`${name.slice(internal.length + 1)}:\${item.id}\`)`;
  }
  return `\`${name}:\${item.id}\``;
}
