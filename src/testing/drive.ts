// Moves a virtual clock until something is true: a tick at a time while runs execute, and
// straight to the next timer (a sleep's end, a wait's timeout, a released backoff) when
// every run is idle, so "two days" takes one jump. Real time passes only in short pauses
// that let the engine's store calls land between ticks.

import type { Engine } from "../engine/engine.js";
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
}

const STUCK_TICKS = 20;
const pause = () => new Promise((r) => setTimeout(r, 2));

export async function driveUntil<T>(o: DriveOptions<T>): Promise<T> {
  const tickMs = o.tickMs ?? 1_000;
  const maxTicks = o.maxTicks ?? 5_000;
  // Nothing executing, nothing runnable and no timer: only an event can wake the runs. After
  // this many such ticks in a row, say so rather than tick on.
  let stuck = 0;
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
    if (!acted && typeof next === "number" && next > o.clock.now()) await o.clock.set(next);
    else await o.clock.advance(tickMs);
    await pause();
  }
  const waiting = await o.engine().listRuns({ status: "waiting", limit: 5 });
  const detail = waiting
    .map((r) => `run "${r.id}" waits for ${r.waitingFor?.join(", ") || "a timer"}`)
    .join("; ");
  throw new Error(
    `cairn/testing: gave up waiting for ${o.what}: ${stuck >= STUCK_TICKS ? "no run can progress" : `${maxTicks} clock ticks passed`}${detail ? ` (${detail}; send the event, or advance the clock past its timeout)` : ""}`,
  );
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
