// Starts a triage run from its own process, as a web handler or a script would: it picks
// the store the way `cairn` does (CAIRN_STORE, CAIRN_PG_SCHEMA) and executes nothing
// itself (worker: false); a `cairn worker` does. Usage: npx tsx start-triage.ts <issue> <title>

import { createEngine, selectStore } from "cairn";
import { triage } from "./triage.js";

const [issue = "1", title = "App crashes on start"] = process.argv.slice(2);
const engine = createEngine({ store: await selectStore(), worker: false });
try {
  const run = await engine.start(
    triage,
    { issue: Number(issue), title },
    { id: `triage-${issue}` },
  );
  console.log(
    run.created
      ? `Started run "${run.id}".`
      : `Run "${run.id}" already exists; nothing new started.`,
  );
  // Follow it until it waits for someone or ends (a worker must be running).
  for (let i = 0; i < 600; i++) {
    const info = await run.info();
    if (info && info.status !== "pending" && info.status !== "running") {
      console.log(
        `It is ${info.status}${info.waitingFor ? ` for ${info.waitingFor.join(", ")}` : ""}.`,
      );
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
} finally {
  await engine.close();
}
