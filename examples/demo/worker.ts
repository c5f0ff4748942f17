// A worker process of the demo, as it would run on one machine: its own engine on the
// shared store, its own directory for workspaces (`root`), the agent's workflow. It starts
// run "fix-issue-42" (idempotent: a second worker gets the existing run) and executes it
// until it completes, reporting what it does as JSON lines on stdout (ledger.ts).
//
//   node --import tsx examples/demo/worker.ts '<WorkerConfig as JSON>'

import { createAi } from "../../src/ai/index.js";
import { createEngine, sqliteStore } from "../../src/index.js";
import { forgeClient } from "../../src/testing/fake-forge.js";
import { defineFixIssue, RUN_ID } from "./agent.js";
import { createReporter } from "./ledger.js";
import { observedStore } from "./observed-store.js";
import { fingerprint, ISSUE } from "./repo.js";
import { createScriptedModel, PRICES } from "./scripted-model.js";

export interface WorkerConfig {
  worker: number;
  db: string;
  /** This machine's directory for workspaces. */
  root: string;
  forgeUrl: string;
  ledger: string;
  upstream: string;
  /** Stop at the first test run and wait there to be killed. */
  holdAtTests: boolean;
}

// Spawned with an IPC channel as a lifeline: if the demo dies, so does this worker.
process.on("disconnect", () => process.exit(1));
if (typeof process.send === "function" && !process.connected) process.exit(1);
process.channel?.unref();

const config = JSON.parse(process.argv[2] ?? "{}") as WorkerConfig;
const report = createReporter(config.ledger, config.worker);

const fixIssue = defineFixIssue({
  ai: createAi({ prices: PRICES }),
  model: createScriptedModel(report),
  forge: forgeClient(config.forgeUrl),
  report,
  beforeTests: async (key, dir) => {
    report.event({ type: "tree", key, files: [...fingerprint(dir)] });
    if (config.holdAtTests) {
      report.event({ type: "hold", key });
      await new Promise(() => {}); // until the SIGKILL
    }
  },
});

const store = observedStore(sqliteStore(config.db), (key, kind, outcome) =>
  report.event({ type: "recorded", key, kind, outcome }),
);
const engine = createEngine({
  store,
  workflows: [fixIssue],
  workspaceRoot: config.root,
  pollIntervalMs: 50,
  leaseMs: 10_000,
});

try {
  report.event({ type: "worker", worker: config.worker, pid: process.pid });
  const run = await engine.start(
    fixIssue,
    { issue: ISSUE, upstream: config.upstream },
    { id: RUN_ID },
  );
  const output = await run.result();
  report.event({ type: "done", output });
  await engine.close();
} catch (err) {
  console.error(`worker ${config.worker}: ${(err as Error).stack ?? String(err)}`);
  await engine.close().catch(() => {});
  process.exitCode = 1;
}
