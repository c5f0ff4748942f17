// A bound on a promise that may never settle (a parent left waiting forever, a livelocked
// run): the test fails with a clear message instead of hitting its timeout.

/** `p`, or a rejection naming `what` after `ms` of real time. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([p, bound]).finally(() => clearTimeout(timer));
}
