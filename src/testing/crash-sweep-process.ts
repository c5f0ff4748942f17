// The crash sweep with real process kills (`crash: "process"`): each execution runs in child
// processes (crash-sweep-child.ts) on a storage of its own (a temporary SQLite file, or a
// fresh PostgreSQL schema). The undisturbed child notes the boundaries it crosses; for each
// boundary a child runs the workflow and SIGKILLs itself exactly there (the same boundary
// hooks as in process), then a fresh child takes the run over after the lease and finishes
// it. The children load the user's workflows from a module, as `cairn worker` does, and
// count side effects in a ledger file of the execution (side-effect-ledger.ts).

import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { decode, encode } from "../codec/codec.js";
import type { Boundary } from "./crash-boundaries.js";
import type { CrashSweepOptions, SweepMode, SweepOutcome } from "./crash-sweep.js";
import { isSideEffectLedger, readLedger, SWEEP_LEDGER_ENV } from "./side-effect-ledger.js";

/** What a child is asked to do (written as JSON to a file; its path is the child's one
 *  argument). */
export interface ChildSpec {
  role: "baseline" | "crash" | "resume";
  /** The user's module, as a file: URL. */
  module: string;
  workflowId: string;
  workflowIds: string[];
  runId: string;
  /** Codec text of the input, the event scripts and the engine options. */
  input: string;
  events: string;
  engineOptions: string;
  maxIdleWakes?: number;
  store: { kind: "sqlite"; path: string } | { kind: "postgres"; url: string; schema: string };
  /** "crash": the boundary to die at, the `ordinal`-th the undisturbed run crossed, and the
   *  ids of all it crossed (see crashPoint). */
  target?: { boundary: Boundary; ordinal: number; known: string[] };
  /** Where a crashing child notes, right before it SIGKILLs itself, its clock's reading
   *  and the boundary it dies at (a `Death`); "resume" starts its clock after that plus
   *  the lease. */
  deathFile: string;
  /** Where a child that was not killed writes its `ChildResult`. */
  resultFile: string;
}

export interface Death {
  clock: number;
  boundary: Boundary;
}

/** What a child that was not killed writes before it exits. */
export interface ChildResult {
  status: SweepOutcome["status"];
  /** Codec text of the output. */
  output?: string;
  error?: { name: string; message: string };
  /** The error that kept the child from driving the run to its end, as thrown. */
  driveError?: SweepOutcome["driveError"];
  /** "baseline": the boundaries crossed, in the order first crossed. */
  boundaries?: Boundary[];
}

/** A child that runs longer than this is killed and the sweep fails, naming it. */
const CHILD_TIMEOUT_MS = 120_000;
const STDERR_TAIL = 4_000;

export function checkProcessOptions<I>(options: CrashSweepOptions<I>): void {
  const where = 'crashSweep({ crash: "process" })';
  if (options.module === undefined || options.module === "") {
    throw new TypeError(
      `${where} needs module: the path of a module exporting your workflows (as \`cairn worker <module>\` takes), which each child process loads`,
    );
  }
  const file = modulePath(options.module);
  if (!existsSync(file)) {
    throw new TypeError(
      `${where}: module "${String(options.module)}" not found (looked for ${file})`,
    );
  }
  if (options.faults?.length) {
    throw new TypeError(
      `${where}: faults are in process only (their functions cannot reach a child process); sweep without them, or use the in-process mode`,
    );
  }
  if (options.storage) {
    throw new TypeError(
      `${where}: storage is in process only; give postgres: "postgres://..." for PostgreSQL (a temporary SQLite file is the default)`,
    );
  }
  if (options.postgres !== undefined && !/^postgres(ql)?:\/\//i.test(options.postgres)) {
    throw new TypeError(`${where}: postgres must be a postgres:// URL`);
  }
  if (options.sideEffects && !isSideEffectLedger(options.sideEffects)) {
    throw new TypeError(
      `${where}: sideEffects counts in this process only, and the workflows run in child processes; make the counter with createSideEffectLedger() in the module (the children append to a ledger file the sweep reads)`,
    );
  }
  if (options.imports?.some((m) => typeof m !== "string" || m === "")) {
    throw new TypeError(`${where}: imports must be module names or paths, e.g. ["tsx"]`);
  }
  for (const [name, value] of Object.entries(options.env ?? {})) {
    if (typeof value !== "string") throw new TypeError(`${where}: env.${name} must be a string`);
  }
  for (const [name, value] of Object.entries(options.engineOptions ?? {})) {
    encodeFor(`engineOptions.${name}`, value);
  }
  encodeFor("input", options.input);
  encodeFor("events", options.events ?? []);
}

function encodeFor(what: string, value: unknown): string {
  try {
    return encode(value, Number.POSITIVE_INFINITY);
  } catch (err) {
    throw new TypeError(
      `crashSweep({ crash: "process" }): ${what} cannot be sent to a child process (${(err as Error).message}); pass plain data`,
      { cause: err },
    );
  }
}

function modulePath(module: string | URL): string {
  const text = String(module);
  return text.startsWith("file:") ? fileURLToPath(text) : resolve(text);
}

export function processMode<I>(options: CrashSweepOptions<I>, runId: string): SweepMode {
  const root = mkdtempSync(join(tmpdir(), "cairn-sweep-"));
  const common = {
    module: pathToFileURL(modulePath(options.module as string | URL)).href,
    workflowId: options.workflow.id,
    workflowIds: options.workflows.map((w) => w.id),
    runId,
    input: encodeFor("input", options.input),
    events: encodeFor("events", options.events ?? []),
    engineOptions: encodeFor("engineOptions", options.engineOptions ?? {}),
    maxIdleWakes: options.maxIdleWakes,
  };
  let executions = 0;
  // One execution on storage of its own: the first child, then, if it was killed, a fresh
  // child that takes the run over and finishes it.
  const execute = async (first: Pick<ChildSpec, "role" | "target">, what: string) => {
    const dir = join(root, `execution-${++executions}`);
    mkdirSync(dir);
    const ledger = join(dir, "side-effects.ledger");
    const storage = storageFor(options, dir, executions);
    const spec: ChildSpec = {
      ...common,
      ...first,
      store: storage.spec,
      deathFile: join(dir, "death.json"),
      resultFile: join(dir, "result.json"),
    };
    await options.reset?.();
    try {
      const child = { options, ledger, what };
      const killed = (await runChild(child, spec)) === "killed";
      if (killed) await runChild(child, { ...spec, role: "resume", target: undefined });
      const death = killed ? (readJson(spec.deathFile) as Death) : undefined;
      const result = readJson(spec.resultFile) as ChildResult;
      return { outcome: outcomeFrom(result, ledger), boundaries: result.boundaries ?? [], death };
    } finally {
      await storage.cleanup();
    }
  };
  return {
    async baseline() {
      const { outcome, boundaries } = await execute({ role: "baseline" }, "the undisturbed run");
      return { outcome, boundaries };
    },
    async crashAt(boundary, ordinal, known) {
      const target = { boundary, ordinal, known: [...known] };
      const { outcome, death } = await execute(
        { role: "crash", target },
        `the crash ${boundary.label}`,
      );
      return { outcome, actual: death?.boundary ?? boundary, crashed: death !== undefined };
    },
    async close() {
      rmSync(root, { recursive: true, force: true });
    },
  };
}

function readJson(file: string): unknown {
  return JSON.parse(readFileSync(file, "utf8"));
}

function outcomeFrom(result: ChildResult, ledger: string): SweepOutcome {
  return {
    status: result.status,
    ...(result.output !== undefined ? { output: decode(result.output) } : {}),
    ...(result.error ? { error: result.error } : {}),
    ...(result.driveError ? { driveError: result.driveError } : {}),
    sideEffects: readLedger(ledger),
  };
}

/** Where an execution's children keep the run: a SQLite file in its directory, or a fresh
 *  schema on the PostgreSQL server given (dropped afterwards, with the directory). */
function storageFor<I>(
  options: CrashSweepOptions<I>,
  dir: string,
  n: number,
): { spec: ChildSpec["store"]; cleanup: () => Promise<void> } {
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  const url = options.postgres;
  if (url === undefined) {
    return {
      spec: { kind: "sqlite", path: join(dir, "cairn.db") },
      cleanup: async () => removeDir(),
    };
  }
  const schema = `cairn_sweep_${randomBytes(5).toString("hex")}_${n}`;
  return {
    spec: { kind: "postgres", url, schema },
    cleanup: async () => {
      removeDir();
      await dropSchema(url, schema);
    },
  };
}

async function dropSchema(url: string, schema: string): Promise<void> {
  const { default: pg } = await import("pg");
  const client = new pg.Client({ connectionString: url });
  client.on("error", () => {});
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end().catch(() => {});
  }
}

// The child runs from beside this file: compiled JavaScript in the package; TypeScript
// in cairn's own checkout, where the child needs tsx (a dev dependency, found from there).
const HERE = fileURLToPath(import.meta.url);
const CHILD = fileURLToPath(new URL(`./crash-sweep-child${extname(HERE)}`, import.meta.url));
const OWN_IMPORTS = extname(HERE) === ".ts" ? ["tsx"] : [];

interface ChildContext {
  options: Pick<CrashSweepOptions<unknown>, "imports" | "env">;
  /** The execution's side-effect ledger. */
  ledger: string;
  /** What the execution is, for errors: "the undisturbed run", "the crash before ...". */
  what: string;
}

/** Runs one child to its end: "killed" when it SIGKILLed itself at its boundary, "exited"
 *  when it finished and wrote its result; anything else is an error naming the child. */
async function runChild(c: ChildContext, spec: ChildSpec): Promise<"killed" | "exited"> {
  const specFile = join(dirname(spec.resultFile), `${spec.role}.json`);
  writeFileSync(specFile, JSON.stringify(spec));
  const imports = [...new Set([...OWN_IMPORTS, ...(c.options.imports ?? [])])];
  const child = spawn(
    process.execPath,
    [...imports.flatMap((m) => ["--import", m]), CHILD, specFile],
    {
      env: { ...process.env, ...c.options.env, [SWEEP_LEDGER_ENV]: c.ledger },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let stderr = "";
  child.stdout?.resume();
  child.stderr?.on("data", (d) => {
    stderr = (stderr + d).slice(-STDERR_TAIL);
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, CHILD_TIMEOUT_MS);
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((done, fail) => {
    child.on("error", fail);
    child.on("close", (code, signal) => done([code, signal]));
  }).finally(() => clearTimeout(timer));
  if (spec.role === "crash" && signal === "SIGKILL" && existsSync(spec.deathFile)) return "killed";
  if (code === 0 && existsSync(spec.resultFile)) return "exited";
  const how = timedOut
    ? `did not finish within ${CHILD_TIMEOUT_MS / 1000} s and was killed`
    : signal
      ? `was killed by ${signal}`
      : `exited with code ${code}`;
  throw new Error(
    `crashSweep({ crash: "process" }): the ${spec.role} child process of ${c.what} (run ${JSON.stringify(spec.runId)}, workflow ${spec.workflowId}) ${how}${stderr.trim() ? `:\n${stderr.trim()}` : ""}`,
  );
}
