// The demo's side-effect ledger: a JSON-lines file every step appends to at the moment its
// side effect happens (a paid model call, a file written, a test run, a chat message).
// Workers append, the demo's main process reads it to count: a step replayed from the
// journal appends nothing, so a count of 2 would mean a side effect ran twice.

import { appendFileSync, existsSync, readFileSync } from "node:fs";

export interface LedgerLine {
  /** "effect": something happened in the world; "lookup": a read (reconcile). */
  kind: "effect" | "lookup";
  /** The step key, e.g. "edit#2". */
  key: string;
  /** What happened, in words. */
  what: string;
  worker: number;
  pid: number;
  at: number;
  tokens?: number;
  usd?: number;
}

export interface Ledger {
  record(line: Omit<LedgerLine, "worker" | "pid" | "at">): void;
}

export function openLedger(path: string, worker: number): Ledger {
  return {
    record(line) {
      // appendFileSync: the line is in the file before the step returns, so a SIGKILL
      // right after cannot lose it.
      const full: LedgerLine = { ...line, worker, pid: process.pid, at: Date.now() };
      appendFileSync(path, `${JSON.stringify(full)}\n`);
    },
  };
}

export function readLedger(path: string): LedgerLine[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as LedgerLine);
}
