// `cairn gc --older-than 30d [--dry-run]`: retention. Deletes finished runs older than the
// cutoff with every record they own and the workspace objects only they held, in batches
// that keep workers on the same store going; never an unfinished run.

import { defineCommand, UsageError } from "../command.js";
import { parseWholeNumber } from "../flag-values.js";
import { toJson } from "../format.js";
import { withClient } from "../store-spec.js";

export const gc = defineCommand({
  name: "gc",
  summary: "delete finished runs older than a cutoff (retention)",
  help: `Usage: cairn gc --older-than <duration> [--dry-run] [--batch N] [--json]

Deletes every run that finished (completed, failed or canceled) more than <duration> ago
(e.g. 30d, 12h), with its steps, attempts, intents, events, approvals, stream and the
workspace objects no other run holds. Unfinished runs are never touched. Works in batches
of N runs (one short transaction each), so workers on the store keep going.
Once a run is deleted, its id can be started again: start's idempotency ends here.

Options:
  --older-than <d>  how long ago a run must have finished: 30d, 12h, 90m, 45s, 500ms
  --dry-run         count what would be deleted; delete nothing
  --batch <n>       runs per transaction, 1-1000 (default 500)
  --json            print the totals as JSON
  -h, --help        show this help`,
  options: {
    "older-than": { type: "string" },
    "dry-run": { type: "boolean" },
    batch: { type: "string" },
    json: { type: "boolean" },
  },

  async run({ values }, ctx) {
    const olderThan = values["older-than"];
    if (olderThan === undefined) {
      throw new UsageError("gc needs --older-than <duration>, e.g. --older-than 30d");
    }
    // A unit is required here (unlike the worker's --lease): "--older-than 30" read as 30 ms
    // would delete every finished run.
    if (!/^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)\s*$/.test(olderThan)) {
      throw new UsageError(
        `--older-than ${JSON.stringify(olderThan)}: use a number and a unit, e.g. 30d, 12h, 90m`,
      );
    }
    const batchSize =
      values.batch === undefined ? undefined : parseWholeNumber(values.batch, "batch", 1);
    if (batchSize !== undefined && batchSize > 1000) {
      throw new UsageError(`--batch must be at most 1000 (got ${batchSize})`);
    }
    const dryRun = values["dry-run"] === true;
    const res = await withClient(values, ctx, (engine) =>
      engine.gc({ olderThan, dryRun, ...(batchSize !== undefined && { batchSize }) }),
    );
    if (values.json) {
      ctx.out(toJson({ ...res, dryRun }, 2));
    } else if (dryRun) {
      ctx.out(
        `Would delete ${res.runs} finished run(s) that finished before ${res.finishedBefore.toISOString()} (dry run: nothing deleted).`,
      );
    } else {
      ctx.out(
        `Deleted ${res.runs} finished run(s) that finished before ${res.finishedBefore.toISOString()}, and ${res.objects} workspace object(s) (${res.bytes} bytes) no other run held.`,
      );
    }
    return 0;
  },
});
