// What `cairn worker` prints: one line per lifecycle event of its runs (claimed, completed,
// failed, released, recovered, takeover, lease lost, paused), as text for people or, with
// --json, as JSON lines (pino's shape: level, time, msg, and the fields). --quiet keeps only
// problems. Problems go to stderr; never a payload, since the engine logs none. The
// worker's own lines (started, stopping, stopped) take the same JSON shape.

import type { Logger } from "../index.js";
import type { CliContext } from "./command.js";
import { escapeLineBreaks } from "./format.js";

export type WorkerLogMode = "text" | "json" | "quiet";

const LEVELS = { debug: 20, info: 30, warn: 40, error: 50 } as const;

/** An error as a log field: its name, code and message (internal problems only). */
function errorField(err: unknown): unknown {
  if (!(err instanceof Error)) return err === undefined ? undefined : String(err);
  const code = (err as { code?: unknown }).code;
  return { name: err.name, message: err.message, ...(code !== undefined && { code }) };
}

/** One JSON log line in pino's shape: level, time, pid, the fields, then msg. */
export function jsonLogLine(level: keyof typeof LEVELS, fields: object, message: string): string {
  return JSON.stringify({
    level: LEVELS[level],
    time: Date.now(),
    pid: process.pid,
    ...fields,
    msg: message,
  });
}

export function workerLogger(ctx: CliContext, mode: WorkerLogMode): Logger {
  const line = (level: keyof typeof LEVELS, fields: object, message = ""): void => {
    if (level === "debug") return;
    const toErr = level === "warn" || level === "error";
    if (mode === "quiet" && !toErr) return;
    const { err, ...rest } = fields as { err?: unknown };
    if (mode === "json") {
      const entry = { ...rest, ...(err !== undefined && { err: errorField(err) }) };
      (toErr ? ctx.err : ctx.out)(jsonLogLine(level, entry, message));
      return;
    }
    const time = new Date().toISOString().slice(11, 23);
    const why = err === undefined ? "" : `: ${(err as Error)?.message ?? String(err)}`;
    // One event, one line: a line break from a run id or an error message is shown escaped,
    // so it cannot print what reads as another event.
    const text = escapeLineBreaks(toErr ? `${level}: ${message}${why}` : message);
    (toErr ? ctx.err : ctx.out)(`${time} ${text}`);
  };
  return {
    debug: (f, m) => line("debug", f, m),
    info: (f, m) => line("info", f, m),
    warn: (f, m) => line("warn", f, m),
    error: (f, m) => line("error", f, m),
  };
}

/** What `cairn worker` says about itself (started, stopping, stopped): with --json a log
 *  line with the event and the worker's id, else the text lines (by default the message),
 *  even with --quiet. */
export function workerAnnouncer(ctx: CliContext, mode: WorkerLogMode, workerId: string) {
  return (event: string, message: string, more: { fields?: object; text?: string[] } = {}) => {
    if (mode === "json") {
      ctx.out(jsonLogLine("info", { event, workerId, ...more.fields }, message));
    } else {
      for (const line of more.text ?? [message]) ctx.out(line);
    }
  };
}

/** A logger whose info lines wait until `release()`: what the engine reports while it opens
 *  (it takes over a dead worker's runs then) comes after the banner that says which worker
 *  this is, as every later line does. Problems (warn, error) are not held. */
export function holdUntilStarted(logger: Logger): { logger: Logger; release(): void } {
  let held: Array<[object, string | undefined]> | undefined = [];
  return {
    logger: {
      debug: (f, m) => logger.debug(f, m),
      info: (f, m) => {
        if (held) held.push([f, m]);
        else logger.info(f, m);
      },
      warn: (f, m) => logger.warn(f, m),
      error: (f, m) => logger.error(f, m),
    },
    release() {
      const lines = held ?? [];
      held = undefined;
      for (const [f, m] of lines) logger.info(f, m);
    },
  };
}
