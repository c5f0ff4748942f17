// The SQLite statements executed in a window, counted by text (better-sqlite3's Statement
// methods wrapped): test/sqlite-statements.test.ts and test/statement-count-mark-refresh.
//
// Counted apart, never with the rest: the plain-payload guard's background read of the
// encrypted mark (plain-payloads.ts, #refresh, through store-marks.ts isMarkedEncrypted). The
// first write after the guard's last "not marked" is MARK_FRESH_MS (1 s) old on the store's
// clock sets it off; under the real clock a loaded machine stretched a window of 5 runs past
// that and counted 6 mark reads for 5 ("expected 6 to be 5"). It is a cost per second of the
// store's clock, not per run; every other statement, the writes' own mark reads too, is
// counted as before.

import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const Database = require("better-sqlite3") as {
  prototype: { prepare(sql: string): Record<string, (...a: unknown[]) => unknown> };
};

const MARK_READ = "SELECT 1 FROM store_marks WHERE name = ?";

export interface StatementCounts {
  /** Each statement's text (whitespace folded) and how often it ran while counting. */
  readonly counts: Map<string, number>;
  /** Rows handed back as objects that look like a runs row (they have `workflow`). */
  objectRuns: number;
  /** The guard's background mark reads while counting (not in `counts`). */
  markRefreshes: number;
  counting: boolean;
  /** Empties the counts and starts counting. */
  start(): void;
  /** How many statements whose text matches `re` ran. */
  like(re: RegExp): number;
  /** Every statement counted. */
  total(): number;
}

let installed: StatementCounts | undefined;

/** The counter (installed on the first call, for the rest of the test file). */
export function statementCounts(): StatementCounts {
  if (installed) return installed;
  const c: StatementCounts = {
    counts: new Map(),
    objectRuns: 0,
    markRefreshes: 0,
    counting: false,
    start() {
      c.counts.clear();
      c.objectRuns = 0;
      c.markRefreshes = 0;
      c.counting = true;
    },
    like(re) {
      let n = 0;
      for (const [text, k] of c.counts) if (re.test(text)) n += k;
      return n;
    },
    total() {
      return [...c.counts.values()].reduce((a, b) => a + b, 0);
    },
  };
  const proto = Database.prototype;
  const prepare = proto.prepare;
  proto.prepare = function (this: unknown, sql: string) {
    const st = prepare.call(this, sql);
    const text = sql.replace(/\s+/g, " ").trim();
    for (const m of ["run", "get", "all"]) {
      const f = st[m]!;
      st[m] = function (this: unknown, ...a: unknown[]) {
        const out = f.apply(this, a);
        if (!c.counting) return out;
        if (text === MARK_READ && isMarkRefresh()) {
          c.markRefreshes++;
          return out;
        }
        c.counts.set(text, (c.counts.get(text) ?? 0) + 1);
        const rows = Array.isArray(out) && m === "all" ? out : [out];
        for (const r of rows) {
          if (r !== null && typeof r === "object" && !Array.isArray(r) && "workflow" in r) {
            c.objectRuns++;
          }
        }
        return out;
      };
    }
    return st;
  };
  installed = c;
  return c;
}

/** A mark read made by the guard's background refresh: the only one that goes through the
 *  store's isMarkedEncrypted read (a write's check calls markedIn inside its transaction). */
function isMarkRefresh(): boolean {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 30;
  const stack = new Error().stack ?? "";
  Error.stackTraceLimit = limit;
  return /\bisMarkedEncrypted\b/.test(stack);
}
