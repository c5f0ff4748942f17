// Calls whose throw must not escape: a logger called from the catch of a claim round, a
// heartbeat or a live stream's poll, whose promise nobody awaits. A throw there would be an
// unhandled rejection (which ends a Node process) for a problem already handled.

/** `fn`, with whatever it throws dropped: there is nothing left to report it to. */
export function neverThrows<A extends unknown[]>(fn: (...args: A) => void): (...args: A) => void {
  return (...args) => {
    try {
      fn(...args);
    } catch {
      // Dropped on purpose (see the file's header).
    }
  };
}

/** Calls `fn` now, dropping whatever it throws (an observer's failure, such as a tracing
 *  SDK's, that must not fail the work it observes). */
export function callDroppingThrows(fn: () => void): void {
  neverThrows(fn)();
}
