// `cairn worker <module>`: executes runs of the workflows a module exports until SIGINT or
// SIGTERM, then closes gracefully: running steps get the engine's grace period, leases are
// released so another worker takes over at once. A second signal exits without waiting.

import { closeLeftovers } from "../../engine/close-leftovers.js";
import { createEngine, type Engine, type Logger } from "../../index.js";
import { settlesWithin } from "../../lib/timers.js";
import { defineCommand, UsageError } from "../command.js";
import { parseDuration, parseWholeNumber } from "../flag-values.js";
import { importFirst, loadWorkflows } from "../load-workflows.js";
import { waitForStopSignal } from "../stop-signal.js";
import { ensureOpened, openStore, parseStoreSpec } from "../store-spec.js";
import {
  holdUntilStarted,
  type WorkerLogMode,
  workerAnnouncer,
  workerLogger,
} from "../worker-log.js";

const DEFAULT_CONCURRENCY = 16;
const DEFAULT_LEASE = "30s";
const DEFAULT_POLL_INTERVAL = "250ms";
/** How long running steps get once the worker is asked to stop (the engine's closeGraceMs);
 *  the store calls still under way after close() get as long again. */
const DEFAULT_GRACE = "10s";

export const worker = defineCommand({
  name: "worker",
  summary: "execute runs of the workflows a module exports",
  help: `Usage: cairn worker <module> [--import tsx] [--concurrency N] [--lease 30s] [--poll-interval 250ms] [--grace 10s] [--quiet | --json]

Imports <module> (relative to the current directory), registers every workflow it exports
(and those in exported arrays, e.g. \`export const workflows = [...]\`), and executes their
runs until SIGINT (Ctrl+C) or SIGTERM. Then it stops taking work, lets running steps finish
(up to --grace, 10 s by default) and releases its leases (exit 0); a store call still
unanswered by then (a claim) gets as long again to hand back what it leased. A second
signal exits at once (exit 130). Give the process manager (Kubernetes'
terminationGracePeriodSeconds, systemd's TimeoutStopSec) more than twice --grace.
A signal while it starts (the store not answering yet) stops it as cleanly, once the
store's open has settled or --grace has passed.
A rejection nobody awaited in workflow code is reported and the worker goes on; an
uncaught exception is reported and the worker stops the same graceful way (exit 1).
It prints a banner with its worker id and pid, then one line per event of its runs:
claimed, recovered (taken from an expired lease), takeover (a dead worker's runs),
completed, failed, canceled, paused, released (pending or waiting), lease-lost.

A TypeScript module needs a loader: \`--import tsx\` (npm install -D tsx), or
NODE_OPTIONS="--import tsx" (the same thing, set for the whole process). Plain .js and .mjs
modules need none.

Taking over from a dead worker: a run whose worker died is taken over when its lease ends
(--lease after the last renewal). A dead worker on this machine is found sooner: every
worker checks the pids of this host's workers every lease/3, and takes their runs over at
once. A worker stopped with Ctrl+C or SIGTERM hands its runs back at once (a run whose
step still runs after --grace stays leased until its lease ends).

Options:
  --import <module> import this module first, e.g. a loader (tsx); repeatable;
                    resolved from the current directory
  --concurrency <n> runs executed at once (default ${DEFAULT_CONCURRENCY})
  --lease <d>       how long a claim on a run lasts without renewal; leases are renewed
                    every lease/3 (default ${DEFAULT_LEASE}; e.g. 10s, 2m, or ms)
  --poll-interval <d>
                    how often the store is asked for runnable runs (default
                    ${DEFAULT_POLL_INTERVAL}); new runs and events usually wake it sooner
  --grace <d>       how long running steps get to finish once the worker is asked to
                    stop (default ${DEFAULT_GRACE}; 0 hands them back at once)
  --quiet           only the banner and problems (no line per event)
  --json            JSON lines on stdout (pino's shape: level, time, pid, msg, fields)
  -h, --help        show this help`,
  options: {
    concurrency: { type: "string" },
    import: { type: "string", multiple: true },
    lease: { type: "string" },
    "poll-interval": { type: "string" },
    grace: { type: "string" },
    quiet: { type: "boolean" },
    json: { type: "boolean" },
  },
  positionals: ["module"],

  async run({ values, positionals: [module] }, ctx) {
    const { mode, ...settings } = workerSettings(values);
    const spec = parseStoreSpec(values, ctx);
    const held = holdUntilStarted(workerLogger(ctx, mode));
    const { logger } = held;
    const stray = watchStrayErrors(logger);
    // Heard from the start: a stop asked while the module loads or the store opens (a
    // database that does not answer yet) ends the start-up cleanly, not by the signal's
    // default (which would leave whatever the start had leased until the leases end).
    const stopAsked = Promise.race([
      waitForStopSignal(ctx, "leases expire on their own").then((signal) => `Received ${signal}`),
      stray.fatal.then((what) => `Stopping after ${what}`),
    ]);
    let stopEarly: string | undefined;
    void stopAsked.then((why) => {
      stopEarly = why;
    });
    for (const specifier of values.import ?? []) await importFirst(specifier, ctx.cwd);
    const workflows = await loadWorkflows(module, ctx.cwd);
    if (stopEarly !== undefined) return stoppedEarly(ctx, mode, stopEarly, stray.failed);
    const store = await openStore(spec, { mustExist: false, env: ctx.env });
    const engine = createEngine({ store, workflows, ...settings, logger });
    const opened = ensureOpened(engine);
    const first = await Promise.race([opened.then(() => undefined), stopAsked]).catch((e) => {
      held.release(); // what it did before failing is said
      throw e;
    });
    if (first !== undefined) {
      // Asked to stop while the store opens: close() waits for that open only so long,
      // and closes whatever it started (the worker's row, a claim) once it settles.
      opened.catch(() => {});
      held.release();
      await engine.close();
      await closeLeftoversWithin(engine, settings.closeGraceMs, (text) =>
        workerAnnouncer(ctx, mode, "")("stopping", text),
      );
      return stoppedEarly(ctx, mode, first, stray.failed);
    }

    const { workerId } = engine;
    const announce = workerAnnouncer(ctx, mode, workerId);
    announce("started", `cairn worker ${workerId} started`, {
      fields: {
        store: store.description,
        concurrency: settings.concurrency,
        workflows: workflows.map((wf) => wf.id),
      },
      text: [
        `cairn worker ${workerId} (pid ${process.pid}, store ${store.description}, concurrency ${settings.concurrency})`,
        "Registered workflows:",
        ...workflows.map((wf) => `  ${wf.id}`),
        "Running; stop with Ctrl+C or SIGTERM.",
      ],
    });
    held.release();
    const stop = await stopAsked;
    announce("stopping", `${stop}: finishing running steps, then releasing leases...`);
    await engine.close();
    await closeLeftoversWithin(engine, settings.closeGraceMs, (text) => announce("stopping", text));
    announce("stopped", "Worker stopped.");
    return stray.failed ? 1 : 0;
  },
});

/** The process exits once the command returns: work close() left running (a claim, a
 *  create or the store's open that answered after its bound) would be cut, and the runs it
 *  leased stay leased to this worker, gone, until their leases end. It gets as long again
 *  as close() gave the steps; a second signal exits at once. */
async function closeLeftoversWithin(
  engine: Engine,
  graceMs: number,
  say: (text: string) => void,
): Promise<void> {
  const leftovers = closeLeftovers(engine);
  if (await settlesWithin(leftovers, 0)) return;
  say(
    `A store call is still under way: waiting up to ${graceMs / 1000} s to hand back what it leased...`,
  );
  if (!(await settlesWithin(leftovers, graceMs))) {
    say("The store did not answer in time; runs it leased stay leased until their leases end.");
  }
}

/** A stop asked before the worker had started: it says so and exits as a stop does. */
function stoppedEarly(
  ctx: Parameters<typeof workerAnnouncer>[0],
  mode: WorkerLogMode,
  why: string,
  failed: boolean,
): number {
  workerAnnouncer(ctx, mode, "")("stopped", `${why} while starting: worker stopped.`);
  return failed ? 1 : 0;
}

/** Errors user code lets escape (a promise nobody awaited that rejects, a throw in a timer)
 *  would by Node's default end the process at once: a stack trace, and every run of this
 *  worker left leased until its lease ends. A rejection concerns one call of one run: it is
 *  reported and the worker goes on. After an uncaught exception the process may be in any
 *  state: it is reported, and the worker stops gracefully (`fatal`), exiting 1. */
function watchStrayErrors(logger: Logger): { fatal: Promise<string>; readonly failed: boolean } {
  let failed = false;
  let fail: (what: string) => void = () => {};
  const fatal = new Promise<string>((resolve) => {
    fail = resolve;
  });
  process.on("unhandledRejection", (err) =>
    logger.error(
      { err },
      "unhandled rejection of a promise nobody awaited (in workflow code?); the worker goes on",
    ),
  );
  process.on("uncaughtException", (err) => {
    logger.error({ err }, "uncaught exception (in workflow code?); stopping the worker");
    failed = true;
    fail("an uncaught exception");
  });
  return {
    fatal,
    get failed() {
      return failed;
    },
  };
}

/** The engine's settings and the log mode, from the flags. */
function workerSettings(values: {
  concurrency?: string | undefined;
  lease?: string | undefined;
  "poll-interval"?: string | undefined;
  grace?: string | undefined;
  quiet?: boolean | undefined;
  json?: boolean | undefined;
}): {
  concurrency: number;
  leaseMs: number;
  pollIntervalMs: number;
  closeGraceMs: number;
  mode: WorkerLogMode;
} {
  const concurrency =
    values.concurrency === undefined
      ? DEFAULT_CONCURRENCY
      : parseWholeNumber(values.concurrency, "concurrency", 1);
  const leaseMs = parseDuration(values.lease ?? DEFAULT_LEASE, "lease", 100);
  const pollIntervalMs = parseDuration(
    values["poll-interval"] ?? DEFAULT_POLL_INTERVAL,
    "poll-interval",
    1,
  );
  const closeGraceMs = parseDuration(values.grace ?? DEFAULT_GRACE, "grace", 0);
  if (values.quiet && values.json) {
    throw new UsageError("--quiet and --json cannot be combined (--json prints every event)");
  }
  const mode: WorkerLogMode = values.json ? "json" : values.quiet ? "quiet" : "text";
  return { concurrency, leaseMs, pollIntervalMs, closeGraceMs, mode };
}
