// Moves a virtual clock until something is true: a tick at a time while runs execute, and
// straight to the next timer (a sleep's end, a wait's timeout, a released backoff) when
// every run is idle, so "two days" takes one jump. Real time passes only in short pauses
// that let the engine's store calls land between ticks.
//
// A run that sleeps in a loop with no way out would have the clock jump from timer to timer
// until the tick limit (a minute of real time, far past a test's timeout). Given a count of
// the work done (step and effect functions started), the drive gives up once timers woke
// the runs `maxIdleWakes` times in a row with no work done in between: a run that only
// sleeps (or waits out timeouts) again and again is told apart in a second or two.

import type { Engine } from "../engine/engine.js";
import { APPROVAL_EVENT_PREFIX } from "../workflow/approval-calls.js";
import type { VirtualClock } from "./virtual-clock.js";

export interface DriveOptions<T> {
  engine: () => Engine;
  clock: VirtualClock;
  /** Returns a value (not undefined) when done. */
  done: () => Promise<T | undefined>;
  /** What is awaited, for the error when it never happens. */
  what: string;
  /** Called before each tick (e.g. to send an event a run now waits for); returns true
   *  when it did something that makes a run runnable (then the clock only ticks). */
  onTick?: () => Promise<boolean | undefined>;
  tickMs?: number;
  maxTicks?: number;
  /** How much work the runs did so far (a count that grows when a step or effect function
   *  starts). Without it, timer wakes are not counted. */
  work?: () => number;
  /** Timer wakes in a row with no work done in between before giving up (default
   *  DEFAULT_MAX_IDLE_WAKES). */
  maxIdleWakes?: number;
  /** Called after each move of the clock; settles once what the move set off that must keep
   *  pace with the clock has answered (the serving worker's lease renewals: test-engine.ts). */
  caughtUp?: () => Promise<void>;
}

/** Timer wakes in a row, with no step or effect function started in between, after which a
 *  drive gives up: a loop of sleeps that never ends. */
export const DEFAULT_MAX_IDLE_WAKES = 200;

const STUCK_TICKS = 20;
const pause = () => new Promise((r) => setTimeout(r, 2));

export async function driveUntil<T>(o: DriveOptions<T>): Promise<T> {
  const tickMs = o.tickMs ?? 1_000;
  const maxTicks = o.maxTicks ?? 5_000;
  // Nothing executing, nothing runnable and no timer: only an event can wake the runs. After
  // this many such ticks in a row, say so rather than tick on.
  let stuck = 0;
  const idle = idleWakes(o);
  for (let i = 0; i < maxTicks && stuck < STUCK_TICKS; i++) {
    const v = await o.done();
    if (v !== undefined) return v;
    const engine = o.engine();
    // Look before sending: a run seen idle here is seen the same way by onTick, so an event
    // it sends is never followed by a jump past the wait it was for.
    const busy = await engine.listRuns({ status: ["running", "pending"], limit: 1 });
    const next = busy.length === 0 ? await nextWake(engine) : undefined;
    const acted = (await o.onTick?.()) === true;
    stuck = busy.length === 0 && next === undefined && !acted ? stuck + 1 : 0;
    const jump = !acted && typeof next === "number" && next > o.clock.now();
    if (idle.count(jump, acted)) throw await idle.error(o.engine());
    if (jump) await o.clock.set(next);
    else await o.clock.advance(tickMs);
    await o.caughtUp?.();
    await pause();
  }
  const waiting = await o.engine().listRuns({ status: "waiting", limit: 5 });
  const detail = waiting
    .map((r) => `run "${r.id}" waits for ${waitsFor(r.waitingFor) || "a timer"}`)
    .join("; ");
  const approval = waiting.some((r) => r.waitingFor?.some(isApproval));
  const advice = approval
    ? 'send the event, answer the approval (an events entry { approval: "<name>" }), or advance the clock past its timeout'
    : "send the event, or advance the clock past its timeout";
  throw new Error(
    `cairn/testing: gave up waiting for ${o.what}: ${stuck >= STUCK_TICKS ? "no run can progress" : `${maxTicks} clock ticks passed`}${detail ? ` (${detail}; ${advice})` : ""}`,
  );
}

const isApproval = (name: string) => name.startsWith(APPROVAL_EVENT_PREFIX);

/** What a run waits for: its events' names, and an approval as `approval "merge"` (not the
 *  reserved event it waits for, which no test can send). */
function waitsFor(names: string[] | undefined): string {
  return (names ?? [])
    .map((n) =>
      isApproval(n) ? `approval ${JSON.stringify(n.slice(APPROVAL_EVENT_PREFIX.length))}` : n,
    )
    .join(", ");
}

/** Counts the timer wakes in a row with no work done (nothing counted without `o.work`). */
function idleWakes(o: DriveOptions<unknown>) {
  const max = o.maxIdleWakes ?? DEFAULT_MAX_IDLE_WAKES;
  const from = o.clock.now();
  let work = o.work?.();
  let wakes = 0;
  return {
    /** Notes one look (`jump`: the clock is about to jump to a timer); true at the limit. */
    count(jump: boolean, acted: boolean): boolean {
      if (!o.work) return false;
      const now = o.work();
      if (acted || now !== work) wakes = 0;
      work = now;
      if (jump) wakes++;
      return wakes > max;
    },
    async error(engine: Engine): Promise<Error> {
      const sleeping = (await engine.listRuns({ status: "waiting", limit: 5 }))
        .filter((r) => r.wakeAt)
        .map(
          (r) =>
            `run "${r.id}" ${r.waitingFor?.length ? `waits for ${waitsFor(r.waitingFor)} until` : "sleeps until"} ${r.wakeAt?.toISOString()}`,
        )
        .join("; ");
      return new Error(
        `cairn/testing: gave up waiting for ${o.what}: the runs only sleep: timers woke them ${max} times in a row (virtual time went from ${new Date(from).toISOString()} to ${new Date(o.clock.now()).toISOString()}) and no step or effect ran in between${sleeping ? ` (${sleeping})` : ""}. A loop of sleeps or timed-out waits with no way out never finishes: give it one (a step whose result ends it, a deadline, an event). If it is meant to sleep that often with nothing else to do, raise maxIdleWakes (createTestEngine or crashSweep; default ${DEFAULT_MAX_IDLE_WAKES}).`,
      );
    },
  };
}

/** The earliest timer of the waiting runs; undefined when there is none; null when a waiting
 *  run already has an event it waits for (it is runnable: no jump past its wait). */
async function nextWake(engine: Engine): Promise<number | null | undefined> {
  const waiting = await engine.listRuns({ status: "waiting", limit: 1000 });
  let next: number | undefined;
  for (const r of waiting) {
    if (r.waitingFor?.length) {
      const events = await engine.listEvents(r.id);
      if (events.some((e) => !e.consumedBy && r.waitingFor?.includes(e.name))) return null;
    }
    const at = r.wakeAt?.getTime();
    if (at !== undefined && (next === undefined || at < next)) next = at;
  }
  return next;
}
