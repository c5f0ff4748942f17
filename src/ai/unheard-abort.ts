// A provider that does not hear its signal (a stalled connection, a stream that neither
// closes nor errors when aborted) must not hold its call once the caller or the step gave
// up on it: with no step timeout the step stayed in flight for ever, so the run could
// neither suspend nor end while the SDK had already rejected with the abort.

/** `given`, or the signal's reason once it fires first (at once when it already has). */
export function orAborted<T>(given: PromiseLike<T>, signal: AbortSignal | undefined): Promise<T> {
  const work = Promise.resolve(given);
  if (!signal) return work;
  if (signal.aborted) {
    work.catch(() => {}); // given up on: its own failure is no one's to hear
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}
