// Times and durations a run's record takes must be finite numbers. SQLite would store NaN
// as NULL (a waiting run with no timer, never woken) and Infinity as is (a lease that never
// ends); PostgreSQL refuses both as parameters but, sent in JSON as its grouped writes are,
// would get null. Both stores refuse them by name instead, before anything is written.

import { StoreError } from "../errors.js";

/** The error for the first of `fields` that is a number but not finite (null and absent
 *  fields are fine), or undefined. */
export function notFinite(
  verb: string,
  runId: string,
  fields: Record<string, number | null | undefined>,
): StoreError | undefined {
  for (const name in fields) {
    const value = fields[name];
    if (value != null && !Number.isFinite(value)) {
      return new StoreError(
        `${verb}: run "${runId}": ${name} is ${String(value)}; it must be a finite number.`,
      );
    }
  }
  return undefined;
}
