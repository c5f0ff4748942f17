// `cairn check-replay <module>`: replays the recorded runs of the workflows a module exports
// against that module's code — executing no step and writing nothing — and fails (exit 1)
// if any run would hit non-determinism. Run it before deploying new code under a version
// that has runs in flight.

import { checkReplay } from "../../testing/replay-check.js";
import { defineCommand } from "../command.js";
import { parseWholeNumber } from "../flag-values.js";
import { oneLine, printable, quoted, table, toJson } from "../format.js";
import { importFirst, loadWorkflows } from "../load-workflows.js";
import { openStore, parseStoreSpec } from "../store-spec.js";

export const checkReplayCommand = defineCommand({
  name: "check-replay",
  summary: "replay recorded runs against a module's code; report non-determinism",
  help: `Usage: cairn check-replay <module> [--import tsx] [--run ID]... [--limit N] [--json]

Imports <module> like "cairn worker" does and replays the journal of every recorded run of
its workflows (same name and version) against that code, without executing any step or
writing anything. Exit code 1 if any run diverges (the code now calls something other than
what the journal recorded) or the replay fails otherwise; 0 if all match.

Options:
  --import <module> import this module first, e.g. a loader (tsx) for a TypeScript
                    module; repeatable; resolved from the current directory
  --run <id>        check only this run (repeatable)
  --limit <n>       at most n runs per workflow, newest first (default 1000)
  --json            print the results as JSON
  -h, --help        show this help`,
  options: {
    import: { type: "string", multiple: true },
    run: { type: "string", multiple: true },
    limit: { type: "string" },
    json: { type: "boolean" },
  },
  positionals: ["module"],

  async run({ values, positionals: [module] }, ctx) {
    const limit = values.limit === undefined ? 1_000 : parseWholeNumber(values.limit, "limit", 1);
    for (const specifier of values.import ?? []) await importFirst(specifier, ctx.cwd);
    const workflows = await loadWorkflows(module, ctx.cwd);
    const asked = values.run && [...new Set(values.run)];
    const store = await openStore(parseStoreSpec(values, ctx), { mustExist: true, env: ctx.env });
    const results = await checkReplay({
      store,
      workflows,
      limit,
      ...(asked ? { runIds: asked } : {}),
    });
    const bad = results.filter((r) => r.verdict !== "ok");
    // A run asked for by --run that was not checked (a typo, a run deleted since, a run of
    // another workflow or version) must not pass the check unseen: CI would stay green.
    const unchecked = (asked ?? []).filter((id) => !results.some((r) => r.runId === id));
    if (values.json) {
      ctx.out(toJson(results, 2));
    } else {
      ctx.out(
        table(
          ["run", "workflow", "status", "verdict", "replayed", "detail"],
          results.map((r) => [
            r.runId,
            r.workflow,
            r.status,
            r.verdict,
            String(r.replayed),
            oneLine(r.detail, 120),
          ]),
        ),
      );
      // The table cuts a detail at 120 characters, before a divergence says what the code
      // called instead: each run not ok gets its detail whole, on a line of its own.
      if (bad.length > 0) {
        ctx.out(
          `\nNot ok (${bad.length}):\n${bad.map((r) => `  ${quoted(r.runId)} ${r.verdict}: ${printable(r.detail)}`).join("\n")}`,
        );
      }
      ctx.out(
        `${results.length} run(s) checked against ${workflows.map((w) => w.id).join(", ")}: ` +
          `${results.length - bad.length} ok, ${bad.length} not.`,
      );
    }
    if (unchecked.length > 0) {
      ctx.err(
        `cairn: --run ${unchecked.map(quoted).join(", ")} not checked: no such run in the store, or a run of a workflow version the module does not define (it defines ${workflows.map((w) => w.id).join(", ")})`,
      );
    }
    return bad.length > 0 || unchecked.length > 0 ? 1 : 0;
  },
});
