// crashSweep: runs a workflow once undisturbed, then once per durable boundary it crossed,
// crashing there and letting a new engine finish the run after the lease. Every boundary
// whose outcome (status, output, error, counted side effects) differs from the undisturbed
// run is reported, naming the boundary and the side effect. Two modes, one set of
// boundaries (crash-sweep-points.ts): in process (the default, crash-sweep-in-process.ts:
// the engine's store goes dead, as after SIGKILL) and with real processes
// (crash-sweep-process.ts: a child process per execution, SIGKILLed at the boundary).

import type { RunView } from "../engine/views.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import type { Store } from "../store/store.js";
import type { AnyWorkflow, Workflow } from "../workflow/define.js";
import type { CallFault } from "./call-faults.js";
import { type Boundary, boundaryId } from "./crash-boundaries.js";
import { inProcessMode } from "./crash-sweep-in-process.js";
import { compareOutcomes, normalized, storeFailed, storeFailure } from "./crash-sweep-outcome.js";
import { checkProcessOptions, processMode } from "./crash-sweep-process.js";
import type { SideEffectCounter } from "./side-effects.js";
import {
  type ApprovalScript,
  checkScript,
  type EventScript,
  type TestEngineOptions,
} from "./test-engine.js";

export interface CrashSweepOptions<I> {
  /** Every workflow the run may use (children included). */
  workflows: AnyWorkflow[];
  /** The workflow to run, and its input. */
  workflow: Workflow<I, unknown>;
  input: I;
  /** Run id (default "crash-sweep"; children get ids derived from it). */
  runId?: string;
  /** Events sent as soon as the run (or `runId`) waits for them; an entry with `approval`
   *  (`{ approval: "merge", decision?, by?, comment?, answer? }`) answers that approval
   *  (`ctx.approval`) as soon as the run asks it. */
  events?: Array<EventScript | ApprovalScript>;
  /** Fault scripts, applied afresh in every execution of the sweep. */
  faults?: CallFault[];
  /** Counter your fakes report side effects to; reset before each execution. With crash
   *  "process" the children count in a ledger file: make the counter with
   *  createSideEffectLedger() in the module (passing it here is then optional). */
  sideEffects?: SideEffectCounter;
  /** Called before each execution (the undisturbed one and each crash): reset your fakes
   *  here, as each execution starts on fresh storage. Runs in this process, also with
   *  crash "process". */
  reset?: () => void | Promise<void>;
  /** Maps the run's output before outcomes are compared: drop what legitimately depends on
   *  when the crash happened (a timestamp taken after it, a duration). */
  normalize?: (output: unknown) => unknown;
  /** Only crash at the boundaries this returns true for. */
  filter?: (b: Boundary) => boolean;
  /** A new connection to a fresh, empty storage per call pair (default: a temp SQLite file
   *  per execution). In process only; with crash "process" see `postgres`. */
  storage?: () => { store: () => Store; cleanup: () => Promise<void> | void };
  /** Each execution gives up once timers woke the runs this many times in a row with no
   *  step or effect function started in between (createTestEngine's; default 200). */
  maxIdleWakes?: number;
  /** Engine options of every engine (with crash "process": plain data only, no functions). */
  engineOptions?: TestEngineOptions["engineOptions"];
  /** How to crash: "in-process" (default: the engine's store goes dead, fast) or "process"
   *  (each execution in child processes, the first SIGKILLed at the boundary; needs
   *  `module`; `faults` and `storage` are in process only). */
  crash?: "in-process" | "process";
  /** crash "process": the module the children load the workflows from, as `cairn worker`
   *  does (a path, relative to the current directory, or a file: URL). It must export
   *  `workflow` and each of `workflows` (same name and version). */
  module?: string | URL;
  /** crash "process": modules each child imports first (`node --import`), e.g. ["tsx"] for
   *  a TypeScript module. */
  imports?: string[];
  /** crash "process": environment variables for the children, over this process's. */
  env?: Record<string, string>;
  /** crash "process": a postgres:// URL; each execution's run is kept in a fresh schema
   *  there, dropped afterwards. Default: a temporary SQLite file per execution. */
  postgres?: string;
}

export interface SweepOutcome {
  status: RunView["status"];
  output?: unknown;
  error?: { name: string; message: string };
  sideEffects: Record<string, number>;
  /** The error that kept the sweep from driving the run to its end, as thrown (then
   *  `status` is "running" and `error` a CrashSweepError with its message). */
  driveError?: { name: string; message: string; code?: string };
}

export interface BoundaryOutcome extends SweepOutcome {
  boundary: Boundary;
  /** What differs from the undisturbed run; empty when nothing does. */
  differences: string[];
  /** False when this execution finished without reaching the boundary (one the undisturbed
   *  run crossed by timing, e.g. a batch of two records written apart): nothing was tested
   *  there. */
  crashed: boolean;
}

export interface CrashSweepResult {
  baseline: SweepOutcome;
  /** One per boundary crashed at, in the order the undisturbed run crossed them. */
  boundaries: BoundaryOutcome[];
  /** One message per boundary whose outcome differs: where it crashed, and what differs. */
  failures: string[];
}

/** How one mode of the sweep runs its executions (crash-sweep-in-process.ts,
 *  crash-sweep-process.ts). Outcomes come back as the run ended, before `normalize`. */
export interface SweepMode {
  /** The undisturbed execution, and the boundaries it crossed in the order first crossed. */
  baseline(): Promise<{ outcome: SweepOutcome; boundaries: Boundary[] }>;
  /** An execution crashed at `boundary`, the `ordinal`-th the undisturbed one crossed
   *  (`known`: the ids of all it crossed, see crashPoint). */
  crashAt(
    boundary: Boundary,
    ordinal: number,
    known: ReadonlySet<string>,
  ): Promise<{ outcome: SweepOutcome; actual: Boundary; crashed: boolean }>;
  /** Removes what the mode made (temporary files). */
  close(): Promise<void>;
}

export async function crashSweep<I>(options: CrashSweepOptions<I>): Promise<CrashSweepResult> {
  checkOptions(options);
  const runId = options.runId ?? "crash-sweep";
  const mode =
    options.crash === "process" ? processMode(options, runId) : inProcessMode(options, runId);
  try {
    const undisturbed = await mode.baseline();
    const baseline = normalized(undisturbed.outcome, options.normalize);
    if (storeFailed(baseline)) {
      throw new Error(`crashSweep: ${storeFailure(runId, undefined, baseline)}`);
    }
    if (baseline.status !== "completed" && baseline.status !== "failed") {
      throw new Error(
        `crashSweep: the undisturbed run "${runId}" ended ${baseline.status}${baseline.error ? ` (${baseline.error.message})` : ""}; it must complete or fail (in \`events\`: send the events it waits for, and answer its approvals with { approval: "<name>" } entries)`,
      );
    }
    const boundaries: BoundaryOutcome[] = [];
    const failures: string[] = [];
    const known = new Set(undisturbed.boundaries.map(boundaryId));
    for (const [ordinal, boundary] of undisturbed.boundaries.entries()) {
      if (options.filter && !options.filter(boundary)) continue;
      const { outcome, actual, crashed } = await mode.crashAt(boundary, ordinal, known);
      const got = normalized(outcome, options.normalize);
      const differences = compareOutcomes(baseline, got);
      boundaries.push({ ...got, boundary: actual, differences, crashed });
      // A store error stopped the execution: the run "ended running" only because nothing
      // drove it further; said as a difference, it read as a bug of the workflow.
      if (storeFailed(got)) failures.push(storeFailure(actual.runId, actual.label, got));
      else if (differences.length > 0) {
        failures.push(`crash ${actual.label} (run "${actual.runId}"): ${differences.join("; ")}`);
      }
    }
    return { baseline, boundaries, failures };
  } finally {
    await mode.close();
  }
}

const SWEEP_OPTIONS = [
  "workflows",
  "workflow",
  "input",
  "runId",
  "events",
  "faults",
  "sideEffects",
  "reset",
  "normalize",
  "filter",
  "storage",
  "maxIdleWakes",
  "engineOptions",
  "crash",
  "module",
  "imports",
  "env",
  "postgres",
];

function checkOptions<I>(options: CrashSweepOptions<I>): void {
  if (!options?.workflow || !Array.isArray(options.workflows)) {
    throw new TypeError(
      "crashSweep({ workflows, workflow, input }): workflows and workflow are required",
    );
  }
  if (!options.workflows.some((w) => w.id === options.workflow.id)) {
    throw new TypeError(
      `crashSweep: workflow "${options.workflow.id}" is not among workflows (${options.workflows.map((w) => `"${w.id}"`).join(", ") || "none"}); add it there`,
    );
  }
  const unknown = unknownOptionNames(options, SWEEP_OPTIONS);
  if (unknown.length > 0) {
    throw new TypeError(`crashSweep: ${unknownOptionsText(unknown, SWEEP_OPTIONS)}`);
  }
  checkScript(options.events, "crashSweep");
  const crash = options.crash ?? "in-process";
  if (crash !== "in-process" && crash !== "process") {
    throw new TypeError(
      `crashSweep: crash must be "in-process" (the default) or "process" (got ${JSON.stringify(crash)})`,
    );
  }
  const idle = options.maxIdleWakes;
  if (idle !== undefined && !(Number.isInteger(idle) && idle >= 1)) {
    throw new TypeError(
      `crashSweep: maxIdleWakes must be a whole number >= 1 (got ${JSON.stringify(idle)})`,
    );
  }
  if (crash === "process") checkProcessOptions(options);
}
