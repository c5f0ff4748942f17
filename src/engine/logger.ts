// Structured logs through a logger the user can replace: any object with pino's methods
// (`info(fields, message)`, ...) fits, so a pino logger can be passed as it is. cairn logs
// ids, names, statuses, counts and error names/codes: never a payload (inputs, results,
// event payloads, error messages, which may quote them).
//
// The worker's lifecycle is logged at info, one line per event (WorkerEvent below); internal
// problems at warn or error.

/** The pino-compatible shape cairn logs through. */
export interface Logger {
  debug(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
}

/** What the worker reports at info, in `fields.event`. */
export type WorkerEvent =
  /** A run was claimed (`recovered: true`: from a lease that expired without a release). */
  | "claimed"
  | "recovered"
  /** The rows of a dead worker on this host were removed; its runs are claimable now. */
  | "takeover"
  | "completed"
  | "failed"
  | "canceled"
  | "paused"
  /** Handed back to be claimed again (pending) or suspended until a timer or event (waiting). */
  | "released"
  /** Another worker holds the run now; this one stopped it without writing. */
  | "lease-lost";

export interface WorkerEventFields {
  event: WorkerEvent;
  workerId: string;
  runId?: string;
  workflow?: string;
  version?: string;
  epoch?: number;
  status?: string;
  /** Failed runs: the error's name and code, never its message. */
  error?: { name: string; code?: string };
  /** paused: why (a budget, a key, no worker for the version): cairn's words, no payload. */
  reason?: string;
  /** takeover: the dead worker's id. */
  deadWorkerId?: string;
  wakeAt?: string;
  waitingFor?: string[];
}

/** The default: internal problems to stderr as before (`cairn: message: error`), lifecycle
 *  lines dropped (a library does not write to a user's console unasked). */
export function consoleLogger(): Logger {
  const problem = (fields: object, message?: string) => {
    const err = (fields as { err?: unknown }).err;
    const why = err === undefined ? "" : `: ${(err as Error)?.message ?? String(err)}`;
    console.error(`cairn: ${message ?? ""}${why}`);
  };
  return { debug: () => {}, info: dropLine, warn: problem, error: problem };
}

/** The default logger's info: lifecycle lines dropped, so none need be made (two a run). */
export const dropLine = (): void => {};

/** A logger that drops everything. */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
};

/** A lifecycle line's message: short, quoting the run id. */
export function workerEventMessage(f: WorkerEventFields): string {
  const run = f.runId === undefined ? "" : ` run "${f.runId}"`;
  const wf = f.workflow === undefined ? "" : ` (${f.workflow}@${f.version})`;
  switch (f.event) {
    case "takeover":
      return `took over the runs of dead worker "${f.deadWorkerId}"`;
    case "failed":
      return `failed${run}${wf}: ${f.error?.name ?? "Error"}${f.error?.code ? ` ${f.error.code}` : ""}`;
    case "paused":
      return `paused${run}${wf}${f.reason ? `: ${f.reason}` : ""}`;
    case "released":
      return `released${run}${wf} as ${f.status}`;
    case "lease-lost":
      return `lease lost on${run}${wf}; another worker has it`;
    default:
      return `${f.event}${run}${wf}`;
  }
}
