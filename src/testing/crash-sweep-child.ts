// A child process of `crashSweep({ crash: "process" })` (crash-sweep-process.ts starts it
// with the path of a ChildSpec). It loads the user's workflows from their module and drives
// the run on a test engine (virtual clock) over the execution's storage, in one of three
// roles: "baseline" runs it undisturbed and reports the boundaries crossed; "crash" runs
// it and SIGKILLs itself at the boundary it was given (found by the same hooks as the
// in-process sweep), after noting its clock and the boundary; "resume" starts its clock
// past the dead child's lease and finishes the run. A child that is not killed writes its
// run's outcome to the result file. Side effects go to the ledger (side-effect-ledger.ts).

import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { decode, encode } from "../codec/codec.js";
import type { EngineOptions } from "../engine/engine.js";
import { RunNotFoundError } from "../errors.js";
import { sqliteStore } from "../store/sqlite/sqlite-store.js";
import type { Store } from "../store/store.js";
import { APPROVAL_EVENT_PREFIX } from "../workflow/approval-calls.js";
import type { AnyWorkflow } from "../workflow/define.js";
import type { Boundary } from "./crash-boundaries.js";
import { outcomeOf, settleFailed } from "./crash-sweep-outcome.js";
import { crashPoint, noteBoundaries } from "./crash-sweep-points.js";
import type { ChildResult, ChildSpec, Death } from "./crash-sweep-process.js";
import {
  openTestEngine,
  type ScriptEntry,
  type TestEngine,
  type TestEngineInternals,
} from "./test-engine.js";

const DEFAULT_LEASE_MS = 10_000; // the test engine's

async function main(specFile: string): Promise<void> {
  const spec = JSON.parse(readFileSync(specFile, "utf8")) as ChildSpec;
  const workflows = await loadWorkflows(spec);
  const store = await storeFactory(spec.store);
  const engineOptions = decode<Omit<EngineOptions, "store" | "clock" | "workflows">>(
    spec.engineOptions,
  );
  // The execution's children share its workspace directory (one machine's, removed with
  // the execution's directory): a killed child's is not left behind.
  engineOptions.workspaceRoot ??= join(dirname(spec.resultFile), "workspaces");
  const events = decode<ScriptEntry[]>(spec.events);
  const workflow = workflows.find((w) => w.id === spec.workflowId);
  const open = (internals: TestEngineInternals = {}, clockStart?: number) =>
    openTestEngine(
      { workflows, store, engineOptions, clockStart, maxIdleWakes: spec.maxIdleWakes },
      internals,
    );

  let result: ChildResult;
  if (spec.role === "baseline") {
    const seen = new Map<string, Boundary>();
    result = await drive(open(noteBoundaries(seen)), spec, events, workflow);
    result.boundaries = [...seen.values()];
  } else if (spec.role === "crash") {
    const target = spec.target as NonNullable<ChildSpec["target"]>;
    let t: TestEngine | undefined;
    const point = crashPoint(target.boundary, target.ordinal, new Set(target.known), () => {
      const death: Death = { clock: t?.clock.now() ?? 0, boundary: point.actual };
      die(spec.deathFile, death);
    });
    t = open(point.internals);
    result = await drive(t, spec, events, workflow);
  } else {
    const death = JSON.parse(readFileSync(spec.deathFile, "utf8")) as Death;
    const leaseMs = engineOptions.leaseMs ?? DEFAULT_LEASE_MS;
    const t = open({}, death.clock + leaseMs + 1);
    result = await drive(t, spec, await unsent(t, spec.runId, events));
  }
  writeFileSync(spec.resultFile, JSON.stringify(result));
}

/** Notes where and when this child dies, then SIGKILLs it: nothing after this runs, no
 *  store call finishes, nothing is released, as in any other kill. */
function die(deathFile: string, death: Death): never {
  writeFileSync(deathFile, JSON.stringify(death));
  process.kill(process.pid, "SIGKILL");
  // The signal is delivered before the kill call returns; should it not be, block here.
  for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
}

/** Starts the run (given its workflow; not when resuming) and drives it to its end. */
async function drive(
  t: TestEngine,
  spec: ChildSpec,
  events: ScriptEntry[],
  workflow?: AnyWorkflow,
): Promise<ChildResult> {
  try {
    if (workflow) await t.start(workflow, decode(spec.input), { id: spec.runId });
    const { output, ...rest } = outcomeOf(await t.settle(spec.runId, { events }));
    return { ...rest, ...(output !== undefined ? { output: encode(output, Infinity) } : {}) };
  } catch (err) {
    const { status, error, driveError } = settleFailed(err);
    return { status, ...(error ? { error } : {}), ...(driveError ? { driveError } : {}) };
  } finally {
    await t.close();
  }
}

/** The event scripts the dead child had not sent yet: each stored event of a run and name
 *  stands for the first script entry of that run and name not yet accounted for. An
 *  approval's answer is stored as the event "cairn.approval:<key>" (`merge`, `merge#2`):
 *  it stands for an entry answering that name. */
async function unsent(t: TestEngine, runId: string, events: ScriptEntry[]) {
  const stored = new Map<string, number>();
  for (const id of new Set(events.map((e) => e.runId ?? runId))) {
    // A run the dead child had not created yet (a child run, or the run itself) has none.
    const sent = await t.engine.listEvents(id).catch((err: unknown) => {
      if (err instanceof RunNotFoundError) return [];
      throw err;
    });
    for (const e of sent) {
      const k = e.name.startsWith(APPROVAL_EVENT_PREFIX)
        ? `${id} approval ${e.name.slice(APPROVAL_EVENT_PREFIX.length).replace(/#\d+$/, "")}`
        : `${id} ${e.name}`;
      stored.set(k, (stored.get(k) ?? 0) + 1);
    }
  }
  return events.filter((e) => {
    const k =
      "approval" in e
        ? `${e.runId ?? runId} approval ${e.approval.replace(/#\d+$/, "")}`
        : `${e.runId ?? runId} ${e.name}`;
    const n = stored.get(k) ?? 0;
    if (n > 0) stored.set(k, n - 1);
    return n === 0;
  });
}

async function storeFactory(spec: ChildSpec["store"]): Promise<() => Store> {
  if (spec.kind === "sqlite") return () => sqliteStore(spec.path, { synchronous: "normal" });
  const { postgresStore } = await import("../postgres.js");
  return () => postgresStore(spec.url, { schema: spec.schema });
}

/** The workflows the sweep names, from the user's module (each exported as a workflow, or
 *  inside an exported array, as `cairn worker` finds them). */
async function loadWorkflows(spec: ChildSpec): Promise<AnyWorkflow[]> {
  const file = fileURLToPath(spec.module);
  let mod: Record<string, unknown>;
  try {
    mod = await import(spec.module);
  } catch (err) {
    const ts = (err as { code?: unknown }).code === "ERR_UNKNOWN_FILE_EXTENSION";
    throw new Error(
      `cannot load module "${file}": ${(err as Error)?.message ?? String(err)}${ts ? '; a TypeScript module needs a loader: pass imports: ["tsx"]' : ""}`,
      { cause: err },
    );
  }
  const found = new Map<string, AnyWorkflow>();
  const add = (v: unknown) => {
    const w = v as Partial<AnyWorkflow> | null;
    if (typeof w?.id === "string" && typeof w.fn === "function") found.set(w.id, w as AnyWorkflow);
  };
  for (const value of Object.values(mod)) {
    if (Array.isArray(value)) value.forEach(add);
    else add(value);
  }
  const missing = [...new Set([spec.workflowId, ...spec.workflowIds])].filter(
    (id) => !found.has(id),
  );
  if (missing.length > 0) {
    throw new Error(
      `module "${file}" does not export ${missing.map((id) => `workflow "${id}"`).join(", ")} (it exports ${[...found.keys()].map((id) => `"${id}"`).join(", ") || "none"}); a child process runs only what the module exports`,
    );
  }
  return spec.workflowIds.map((id) => found.get(id) as AnyWorkflow);
}

try {
  await main(process.argv[2] as string);
  process.exit(0);
} catch (err) {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
