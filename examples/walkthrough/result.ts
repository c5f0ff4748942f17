// Waits for a run's result from any process: handle(workflow, id) knows the output type.
// Usage: npx tsx result.ts <run id>

import { createEngine, selectStore } from "cairn";
import { triage } from "./triage.js";

const engine = createEngine({ store: await selectStore(), worker: false });
try {
  const output = await engine.handle(triage, process.argv[2] ?? "triage-1").result();
  console.log(
    output.posted
      ? `Posted comment ${output.comment} (worker pid ${output.postedBy}).`
      : "Not posted.",
  );
} finally {
  await engine.close();
}
