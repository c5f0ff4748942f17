// PostgreSQL: start() creates a run claimed by the engine's own worker (createRun with
// claimBy) and executes it at once. When the create's commit went through but its answer
// was lost, the retry reads the run back by the call's create token (migration 20) and
// answers created=true, even when, between the lost try and the retry, the claim's lease
// ended and another worker claimed the run. The engine then executed a run another worker
// held: its body ran beside that worker's.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { createVirtualClock } from "../src/testing/index.js";
import { commitLosingPool } from "./helpers/commit-losing-pool.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";

describe.skipIf(!pgUrl)("PostgreSQL: a claimed create whose answer was lost", () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it("start(): a run another worker claimed before the retry is not executed here", async () => {
    const { schema, drop } = testSchema(pgUrl!);
    cleanups.push(drop);
    const losing = commitLosingPool(pgUrl!);
    cleanups.push(() => losing.pool.end());
    const clock = createVirtualClock();
    const other = postgresStore(pgUrl!, { schema });
    await other.open({ clock });
    cleanups.push(() => other.close());

    let bodies = 0;
    const wf = workflow({ name: "held", version: "1" }, async () => {
      bodies++;
      return "done";
    });
    const engine = createEngine({
      store: postgresStore(losing.pool, { schema }),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      leaseMs: 1_000,
    });
    cleanups.push(() => engine.close());
    await engine.getRun("warm-up"); // opens the store (migrations) before the loss is armed

    let takenBy: string | undefined;
    losing.loseAfter(
      (sql) => sql.includes("jsonb_to_recordset"),
      async () => {
        // The claim's lease ends before the retry; another worker claims the run.
        await clock.advance(2_000);
        const claimed = await other.claimRuns({
          workerId: "w-other",
          workflows: ["held@1"],
          limit: 1,
          leaseMs: 600_000,
        });
        takenBy = claimed[0]?.run.leaseOwner ?? undefined;
      },
    );
    const made = await engine.start(wf, null, { id: "run-lost-create" });
    expect(losing.lost()).toBe(1);
    expect(takenBy).toBe("w-other");
    expect(made.created).toBe(true); // this call did make it
    // Give a wrongly adopted execution every chance to begin.
    for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 10));
    expect(bodies).toBe(0);
    const run = await other.getRun("run-lost-create");
    expect(run?.leaseOwner).toBe("w-other");
    expect(run?.status).toBe("running");
  });
});
