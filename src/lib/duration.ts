// Durations as users write them: milliseconds, or "250ms", "30s", "10m", "2h", "2d".

export type Duration = number | string;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** The longest duration cairn schedules: 100,000 years. A time that far off is stored on
 *  every backend and is a valid Date; 1e19 ms was not (PostgreSQL refused the wake time, and
 *  a run sleeping that long failed its release and was executed again, over and over). */
export const MAX_DURATION_MS = 100_000 * 365.25 * 86_400_000;

/** Parses a Duration into milliseconds; `what` names the option in the error message. */
export function toMs(value: Duration, what = "duration"): number {
  let ms: number;
  if (typeof value === "number") {
    if (!Number.isFinite(value) || value < 0) {
      throw new TypeError(`${what}: expected a non-negative number of milliseconds, got ${value}`);
    }
    ms = value;
  } else {
    const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(value);
    if (!m?.[1] || !m[2]) {
      throw new TypeError(
        `${what}: cannot parse ${JSON.stringify(value)}; use milliseconds or a string like "250ms", "30s", "10m", "2h", "2d"`,
      );
    }
    ms = Math.round(Number(m[1]) * (UNIT_MS[m[2]] ?? 1));
  }
  if (ms > MAX_DURATION_MS) {
    throw new TypeError(
      `${what}: ${JSON.stringify(value)} is longer than 100,000 years (${MAX_DURATION_MS} ms), the longest duration cairn schedules; use a shorter one`,
    );
  }
  return ms;
}

/** The furthest time from 1970 a Date can hold, either way (ECMAScript's time value range). */
export const MAX_DATE_MS = 8.64e15;
