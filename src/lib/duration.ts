// Durations as users write them: milliseconds, or "250ms", "30s", "10m", "2h", "2d".

export type Duration = number | string;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parses a Duration into milliseconds; `what` names the option in the error message. */
export function toMs(value: Duration, what = "duration"): number {
  if (typeof value === "number") {
    if (!Number.isFinite(value) || value < 0) {
      throw new TypeError(`${what}: expected a non-negative number of milliseconds, got ${value}`);
    }
    return value;
  }
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(value);
  if (!m?.[1] || !m[2]) {
    throw new TypeError(
      `${what}: cannot parse ${JSON.stringify(value)}; use milliseconds or a string like "250ms", "30s", "10m", "2h", "2d"`,
    );
  }
  return Math.round(Number(m[1]) * (UNIT_MS[m[2]] ?? 1));
}
