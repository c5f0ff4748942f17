// A worker process of the demo: registers the fix-bug workflow, starts run "fix-bug-42"
// (idempotent: a second worker gets the existing run, it does not create another), and
// executes it until it completes. It reports what it does as JSON lines on stdout.
//
//   node --import tsx examples/demo/worker.ts '<WorkerConfig as JSON>'

import { createEngine, sqliteStore } from "../../src/index.js";
import { forgeClient } from "../../src/testing/fake-forge.js";
import { createDemoModel } from "./fake-model.js";
import { openLedger } from "./ledger.js";
import { ISSUE } from "./project.js";
import { type DemoEvent, defineFixBug, RUN_ID } from "./workflow.js";

export interface WorkerConfig {
  worker: number;
  db: string;
  forgeUrl: string;
  ledger: string;
  workspace: string;
}

// Spawned by the demo with an IPC channel: if the demo dies, so does this worker. unref()
// keeps the channel from holding the process open once the run is done.
process.on("disconnect", () => process.exit(1));
if (typeof process.send === "function" && !process.connected) process.exit(1); // gone already
process.channel?.unref();

const config = JSON.parse(process.argv[2] ?? "{}") as WorkerConfig;
const report = (event: DemoEvent) => process.stdout.write(`${JSON.stringify(event)}\n`);

const fixBug = defineFixBug({
  model: createDemoModel(),
  forge: forgeClient(config.forgeUrl),
  ledger: openLedger(config.ledger, config.worker),
  report,
});

const engine = createEngine({
  store: sqliteStore(config.db),
  workflows: [fixBug],
  pollIntervalMs: 25,
  leaseMs: 3_000,
});

try {
  report({ type: "worker", worker: config.worker, pid: process.pid });
  const run = await engine.start(
    fixBug,
    { issue: ISSUE, workspace: config.workspace },
    { id: RUN_ID, budget: { usd: 1 } },
  );
  const output = await run.result();
  report({ type: "done", output });
  await engine.close();
} catch (err) {
  console.error(`worker ${config.worker}: ${(err as Error).stack ?? String(err)}`);
  await engine.close().catch(() => {});
  process.exitCode = 1;
}
