// How a worker tells the demo what happened. Side effects (a paid model call, a tool run, a
// pull request) go to a JSON-lines ledger file, appended synchronously at the moment they
// happen, so a SIGKILL right after cannot lose one; the demo counts them there. Everything
// (side effects too) is also sent as a JSON line on stdout for the live log.

import { appendFileSync, existsSync, readFileSync } from "node:fs";
import type { FixIssueOutput } from "./agent.js";

export interface LedgerLine {
  worker: number;
  pid: number;
  /** The journal key of the call that did it ("model:coder-1#2", "tool:edit_file:call_2a"). */
  key: string;
  /** "lookup" is a read of the world (reconcile), not an effect. */
  kind: "model" | "read" | "edit" | "test" | "git" | "pull-request" | "merge" | "lookup";
  /** What happened, in words. */
  detail: string;
  /** Tokens the provider billed (model calls). */
  tokens?: number;
}

/** One JSON line on a worker's stdout. */
export type DemoEvent =
  | { type: "worker"; worker: number; pid: number }
  | { type: "effect"; line: LedgerLine }
  /** This worker's store wrote the call's record (so this worker executed it). */
  | { type: "recorded"; key: string; kind: string; outcome: "ok" | "error" }
  /** The directory a test run is about to test: path -> fingerprint (repo.ts). */
  | { type: "tree"; key: string; files: Array<[string, string]> }
  /** The worker stops here and waits to be killed. */
  | { type: "hold"; key: string }
  | { type: "done"; output: FixIssueOutput };

export interface Reporter {
  effect(line: Omit<LedgerLine, "worker" | "pid">): void;
  event(event: DemoEvent): void;
}

export function createReporter(ledgerPath: string, worker: number): Reporter {
  const event = (e: DemoEvent) => process.stdout.write(`${JSON.stringify(e)}\n`);
  return {
    effect(line) {
      const full: LedgerLine = { worker, pid: process.pid, ...line };
      appendFileSync(ledgerPath, `${JSON.stringify(full)}\n`);
      event({ type: "effect", line: full });
    },
    event,
  };
}

export function readLedger(path: string): LedgerLine[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as LedgerLine);
}
