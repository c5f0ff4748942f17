// `cairn worker <module>`: executes runs of the workflows a module exports until SIGINT or
// SIGTERM, then closes gracefully: running steps get the engine's grace period, leases are
// released so another worker takes over at once. A second signal exits without waiting.

import { createEngine } from "../../index.js";
import {
  type CliContext,
  type Command,
  expectPositionals,
  parseCommand,
  parseWholeNumber,
  STORE_HELP,
  STORE_OPTIONS,
} from "../command.js";
import { loadWorkflows } from "../load-workflows.js";
import { openStore, parseStoreSpec } from "../store-spec.js";

const DEFAULT_CONCURRENCY = 16;

export const worker: Command = {
  name: "worker",
  summary: "execute runs of the workflows a module exports",
  help: `Usage: cairn worker <module> [--concurrency N]

Imports <module> (a .js or .mjs file, relative to the current directory), registers every
workflow it exports (and those in exported arrays, e.g. \`export const workflows = [...]\`),
and executes their runs until SIGINT (Ctrl+C) or SIGTERM. Then it stops taking work, lets
running steps finish (up to 10 s) and releases its leases. A second signal exits at once.

Options:
  --concurrency <n> runs executed at once (default ${DEFAULT_CONCURRENCY})
  -h, --help        show this help

${STORE_HELP}`,

  async run(args: string[], ctx: CliContext): Promise<number> {
    const { values, positionals } = parseCommand(args, {
      ...STORE_OPTIONS,
      concurrency: { type: "string" },
    });
    if (values.help) {
      ctx.out(worker.help);
      return 0;
    }
    expectPositionals(positionals, ["module"]);
    const concurrency =
      values.concurrency === undefined
        ? DEFAULT_CONCURRENCY
        : parseWholeNumber(values.concurrency, "concurrency", 1);
    const spec = parseStoreSpec(values, ctx);
    const workflows = await loadWorkflows(positionals[0]!, ctx.cwd);
    const store = await openStore(spec, { mustExist: false });
    const engine = createEngine({ store, workflows, concurrency });

    // The engine opens its store lazily; a read surfaces an open failure now, not never.
    try {
      await engine.listRuns({ limit: 1 });
    } catch (err) {
      await engine.close();
      throw err;
    }

    ctx.out(
      `cairn worker ${engine.workerId} (store ${store.description}, concurrency ${concurrency})`,
    );
    ctx.out("Registered workflows:");
    for (const wf of workflows) ctx.out(`  ${wf.id}`);
    ctx.out("Running; stop with Ctrl+C or SIGTERM.");

    const signal = await waitForStopSignal(ctx);
    ctx.out(`Received ${signal}: finishing running steps, then releasing leases...`);
    await engine.close();
    ctx.out("Worker stopped.");
    return 0;
  },
};

function waitForStopSignal(ctx: CliContext): Promise<NodeJS.Signals> {
  // Keeps the process alive however the engine schedules its timers.
  const keepAlive = setInterval(() => {}, 1 << 30);
  return new Promise((resolve) => {
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        ctx.err(`cairn: ${signal} again: exiting without waiting; leases expire on their own`);
        process.exit(130);
      }
      stopping = true;
      clearInterval(keepAlive);
      resolve(signal);
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}
