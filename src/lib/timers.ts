// Timers for durations users choose. Node's setTimeout holds at most 2^31-1 ms (about 24.8
// days): a longer delay fires after 1 ms, with only a warning. So a "25d" step timeout would
// fire at once, and a 30-day sleep waited on in process would wake every millisecond, find
// its time not yet come, and sleep again. Every user-given duration that reaches a timer
// goes through here.

/** The longest delay one setTimeout can hold. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A delay as setTimeout reads it: NaN and negative delays mean "as soon as possible". */
export function delayMs(ms: number): number {
  return Number.isNaN(ms) || ms < 0 ? 0 : ms;
}

/** A delay for a timer that may fire EARLIER than asked without harm (a poll, a heartbeat):
 *  at most MAX_TIMER_MS, never negative or NaN. */
export function timerMs(ms: number): number {
  return Math.min(delayMs(ms), MAX_TIMER_MS);
}

/**
 * Calls `fn` once after `ms`, for any duration: a delay too long for one timer is covered
 * by a chain of them. NaN or a negative delay fires as soon as possible (as setTimeout
 * does); Infinity never fires. Returns a cancel function.
 */
export function setLongTimeout(
  fn: () => void,
  ms: number,
  options: { unref?: boolean } = {},
): () => void {
  let remaining = delayMs(ms);
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    const hop = Math.min(remaining, MAX_TIMER_MS);
    remaining -= hop;
    timer = setTimeout(remaining > 0 ? arm : fn, hop);
    if (options.unref) timer.unref();
  };
  arm();
  return () => clearTimeout(timer);
}

/** Resolves after `ms` of real time, on purpose: a grace for code to stop, not workflow
 *  time. setLongTimeout: a grace (abortGraceMs, replayStallMs) may be set past setTimeout's
 *  2^31-1 ms limit. Unref'd: it keeps no process alive. */
export function realDelay(ms: number): Promise<void> {
  return new Promise((resolve) => {
    setLongTimeout(resolve, ms, { unref: true });
  });
}

/** Resolves in the check phase of the event loop's next turn: code that awaits it lets
 *  timers, I/O callbacks and process.nextTick callbacks run first. */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Waits for `p` to settle (either way), but no longer than `ms`. */
export async function waitAtMost(p: Promise<unknown>, ms: number): Promise<void> {
  let cancel: (() => void) | undefined;
  await Promise.race([
    p.then(
      () => {},
      () => {},
    ),
    new Promise<void>((r) => {
      cancel = setLongTimeout(r, ms);
    }),
  ]);
  cancel?.();
}

/** Whether `p` settled (either way) within `ms`: close() paths that must not hang on a
 *  store that hangs. */
export async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false;
  const noted = p.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  await waitAtMost(noted, ms);
  return settled;
}
