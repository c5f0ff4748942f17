// Store-agnostic benchmark helpers: temp dirs, timing, medians, a gate that lets every run
// reach its first step before the clock starts, a Store decorator that times each verb,
// and the table every section prints. A backend section (sqlite.ts, later postgres.ts)
// only adds its own raw floor.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Store } from "../src/index.js";

/** One line of a section's table. The ratio is always cairn / raw. */
export interface Row {
  name: string;
  unit: string;
  cairn: number;
  raw?: number | undefined;
  /** Which direction is good for this unit, printed beside the ratio. */
  better: "higher" | "lower";
  /** The median of per-round ratios (cairn and raw measured back to back), which drifting
   *  disk latency disturbs less than a ratio of medians. Default: cairn / raw. */
  ratio?: number | undefined;
  /** The target for the ratio (or for `cairn` when there is no raw floor). */
  goal?: { atLeast?: number; atMost?: number } | undefined;
}

export interface SectionReport {
  title: string;
  rows: Row[];
  /** Free-form lines printed under the table: commit stats, breakdowns, caveats. */
  notes: string[];
}

export interface Section {
  title: string;
  run(): Promise<SectionReport>;
}

export function tempDir(prefix = "cairn-bench-"): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export function now(): number {
  return performance.now();
}

export function median(values: readonly number[]): number {
  if (values.length === 0) throw new Error("median() of no values");
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Rejects with `what` if `p` does not settle within `ms`: a stuck benchmark must say why. */
export async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`bench: timed out after ${ms} ms: ${what}`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `check` until truthy; fails after `timeoutMs`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`bench: timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** `parties` callers arrive and wait; `all` resolves once all arrived; `open()` lets them go.
 *  Used so that claiming and starting runs stay outside the measured window. */
export class Barrier {
  private arrived = 0;
  private release!: () => void;
  private allArrived!: () => void;
  private readonly released = new Promise<void>((r) => {
    this.release = r;
  });
  readonly all = new Promise<void>((r) => {
    this.allArrived = r;
  });

  constructor(readonly parties: number) {
    if (parties === 0) this.allArrived();
  }

  arrive(): Promise<void> {
    this.arrived += 1;
    if (this.arrived === this.parties) this.allArrived();
    return this.released;
  }

  open(): void {
    this.release();
  }
}

export interface VerbTiming {
  calls: number;
  /** Call until its promise settled: overlapping calls overlap here. */
  ms: number;
  /** Call until it returned: work done synchronously, blocking the event loop (all of a
   *  better-sqlite3 transaction, fsync included; next to nothing for a network store). */
  blockingMs: number;
}

/** Wall time spent inside each Store verb. */
export class StoreTimings {
  private readonly verbs = new Map<string, VerbTiming>();
  private readonly starts = new Map<string, number>();

  /** When the latest call of `verb` began (performance.now()). */
  lastStart(verb: string): number | undefined {
    return this.starts.get(verb);
  }

  started(verb: string, at: number): void {
    this.starts.set(verb, at);
  }

  private entry(verb: string): VerbTiming {
    let t = this.verbs.get(verb);
    if (!t) {
      t = { calls: 0, ms: 0, blockingMs: 0 };
      this.verbs.set(verb, t);
    }
    return t;
  }

  returned(verb: string, ms: number): void {
    const t = this.entry(verb);
    t.calls += 1;
    t.blockingMs += ms;
  }

  settled(verb: string, ms: number): void {
    this.entry(verb).ms += ms;
  }

  snapshot(): Map<string, VerbTiming> {
    return new Map([...this.verbs].map(([k, v]) => [k, { ...v }]));
  }

  /** What happened since `before` (a snapshot), busiest verbs first. */
  since(before: Map<string, VerbTiming>): Array<[string, VerbTiming]> {
    const out: Array<[string, VerbTiming]> = [];
    for (const [verb, t] of this.verbs) {
      const b = before.get(verb) ?? { calls: 0, ms: 0, blockingMs: 0 };
      if (t.calls > b.calls) {
        out.push([
          verb,
          { calls: t.calls - b.calls, ms: t.ms - b.ms, blockingMs: t.blockingMs - b.blockingMs },
        ]);
      }
    }
    return out.sort((x, y) => y[1].ms - x[1].ms);
  }
}

/** A Store decorator that times every verb. Same object shape, so backend extras (e.g.
 *  SqliteStore.pragma) keep working. Costs about a microsecond a call. */
export function timedStore<S extends Store>(store: S, timings: StoreTimings): S {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function" || typeof prop !== "string") return value;
      return (...args: unknown[]) => {
        const t0 = now();
        timings.started(prop, t0);
        const out = (value as (...a: unknown[]) => unknown).apply(target, args);
        timings.returned(prop, now() - t0);
        if (out instanceof Promise) return out.finally(() => timings.settled(prop, now() - t0));
        return out;
      };
    },
  });
}

/** A Store decorator that counts every verb's calls in `calls` (by verb). Same object shape,
 *  as timedStore. */
export function countedStore<S extends Store>(store: S, calls: Map<string, number>): S {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function" || typeof prop !== "string") return value;
      return (...args: unknown[]) => {
        calls.set(prop, (calls.get(prop) ?? 0) + 1);
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

/** "appendRecords 100x 150 ms (blocking 148 ms), ..." for the top `limit` verbs. */
export function describeTimings(entries: Array<[string, VerbTiming]>, limit = 4): string {
  return entries
    .slice(0, limit)
    .map(([verb, t]) => `${verb} ${t.calls}x ${fmt(t.ms)} ms (blocking ${fmt(t.blockingMs)} ms)`)
    .join(", ");
}

/** Numbers with 3 significant digits below 100, whole numbers with separators above. */
export function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  const abs = Math.abs(n);
  if (abs >= 100) return Math.round(n).toLocaleString("en-US");
  if (abs >= 10) return n.toFixed(1);
  if (abs >= 1) return n.toFixed(2);
  return n.toPrecision(3);
}

export function ratio(row: Row): number | undefined {
  if (row.ratio !== undefined) return row.ratio;
  return row.raw === undefined || row.raw === 0 ? undefined : row.cairn / row.raw;
}

/** "goal >= 0.80x: met" for a row with a goal, else "". */
export function describeGoal(row: Row): string {
  if (!row.goal) return "";
  const value = ratio(row) ?? row.cairn;
  const { atLeast, atMost } = row.goal;
  const parts: string[] = [];
  let met = true;
  if (atLeast !== undefined) {
    parts.push(`>= ${atLeast.toFixed(2)}`);
    met &&= value >= atLeast;
  }
  if (atMost !== undefined) {
    parts.push(`<= ${atMost.toFixed(2)}`);
    met &&= value <= atMost;
  }
  return `${parts.join(" and ")}: ${met ? "met" : "NOT met"}`;
}

export function formatTable(report: SectionReport): string {
  const header = ["benchmark", "unit", "cairn", "raw floor", "cairn/raw", "goal"];
  const body = report.rows.map((r) => {
    const q = ratio(r);
    return [
      r.name,
      r.unit,
      fmt(r.cairn),
      r.raw === undefined ? "-" : fmt(r.raw),
      q === undefined ? "-" : `${q.toFixed(2)}x (${r.better} is better)`,
      describeGoal(r),
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i >= 2 && i <= 3 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)));
  const sep = widths.map((w) => "-".repeat(w));
  const lines = [line(header), sep, ...body.map(line)].map((cells) => cells.join("  ").trimEnd());
  const notes = report.notes.map((n) => `  - ${n}`);
  return [`== ${report.title} ==`, ...lines, ...(notes.length ? ["", ...notes] : [])].join("\n");
}
