// A side-effect counter that also counts across processes. `crashSweep({ crash: "process" })`
// runs the workflow in child processes and SIGKILLs them, so a counter in memory would die
// with each child: instead each child is told (by the environment variable below, which the
// sweep sets for its children) where the execution's ledger file is, and every record is
// appended to it as one line, synchronously, so a record made before the kill is on file.
// The sweep reads the file once the execution is over. Outside a sweep's child (a test,
// an in-process sweep) the counter is the in-memory one from createSideEffectCounter, so
// one module of workflows and fakes serves both modes.
//
// The environment is read here, not only in cli/, because it is the one channel from a
// sweep to code it did not write (the user's module, loaded in the child): it crosses into
// a child process and into any copy of cairn that module imports.

import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { createSideEffectCounter, type SideEffectCounter } from "./side-effects.js";

/** Set by a process-mode crash sweep for its children: the execution's ledger file. */
export const SWEEP_LEDGER_ENV = "CAIRN_SWEEP_LEDGER";

const LEDGER = Symbol.for("cairn.sideEffectLedger");

interface LedgerLine {
  name: string;
  key?: string;
}

/** Whether `counter` was made by createSideEffectLedger (and so counts in a sweep's child). */
export function isSideEffectLedger(counter: SideEffectCounter): boolean {
  return (counter as { [LEDGER]?: true })[LEDGER] === true;
}

/** The counts a ledger file holds, as createSideEffectCounter counts them (with a key,
 *  distinct keys); none for a file that does not exist. */
export function readLedger(file: string): Record<string, number> {
  const counter = createSideEffectCounter();
  if (!existsSync(file)) return counter.counts();
  const lines = readFileSync(file, "utf8").split("\n");
  for (const [i, text] of lines.entries()) {
    if (text === "") continue;
    let line: LedgerLine;
    try {
      line = JSON.parse(text) as LedgerLine;
    } catch (err) {
      throw new Error(`side-effect ledger "${file}": line ${i + 1} is not a record (${text})`, {
        cause: err,
      });
    }
    counter.record(line.name, line.key);
  }
  return counter.counts();
}

/**
 * A side-effect counter for workflows a crash sweep may run in child processes: the same
 * `record(name, key?)`, `counts()`, `reset()` and `paused` as createSideEffectCounter. In a
 * child of `crashSweep({ crash: "process" })` each record is appended to the execution's
 * ledger (counts and reset read and clear that file); anywhere else it counts in memory,
 * exactly as createSideEffectCounter does. Make it in the module the sweep loads, next to
 * the fakes that report to it.
 */
export function createSideEffectLedger(): SideEffectCounter {
  const memory = createSideEffectCounter();
  const file = () => process.env[SWEEP_LEDGER_ENV] || undefined;
  const counter: SideEffectCounter & { [LEDGER]: true } = {
    [LEDGER]: true,
    get paused() {
      return memory.paused;
    },
    set paused(value: boolean) {
      memory.paused = value;
    },
    record(name: string, key?: string): void {
      const ledger = file();
      if (!ledger) {
        memory.record(name, key);
        return;
      }
      if (typeof name !== "string" || name === "") {
        throw new TypeError("sideEffects.record(name): name must be a non-empty string");
      }
      if (key !== undefined && typeof key !== "string") {
        throw new TypeError(`sideEffects.record("${name}", key): key must be a string`);
      }
      const line: LedgerLine = key === undefined ? { name } : { name, key };
      appendFileSync(ledger, `${JSON.stringify(line)}\n`);
    },
    counts(): Record<string, number> {
      const ledger = file();
      return ledger ? readLedger(ledger) : memory.counts();
    },
    reset(): void {
      const ledger = file();
      if (ledger) writeFileSync(ledger, "");
      else memory.reset();
    },
  };
  return counter;
}
