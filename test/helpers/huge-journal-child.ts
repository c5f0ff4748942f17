// Child process of test/postgres-huge-journal-findings.test.ts: a run whose 270 steps each returned a
// 2 MiB string (540 MiB of results), loaded, resumed and forked on PostgreSQL. The driver
// threw ERR_STRING_TOO_LONG inside its socket handler when loadJournal read the steps as
// one JSON text: no caller can catch that, so it is caught here, process-wide, and told by
// the exit code (3) to the test, which survives it.

import { createEngine, workflow } from "../../src/index.js";
import { realClock } from "../../src/lib/clock.js";
import { postgresStore } from "../../src/store/postgres/postgres-store.js";

process.on("uncaughtException", (e) => {
  console.error(`uncaught: ${(e as { code?: string }).code ?? ""} ${e.message.slice(0, 200)}`);
  process.exit(3);
});

const [url, schema] = process.argv.slice(2) as [string, string];
const STEPS = 270;
const MIB = 1024 * 1024;
const MARK = "big-mark";

const wf = workflow({ name: "w", version: "1" }, async (ctx) => {
  let total = 0;
  for (let i = 0; i < STEPS; i++) total += (await ctx.step(`s${i}`, () => MARK)).length;
  await ctx.waitForEvent("go");
  return total;
});

const store = () => postgresStore(url, { schema });

async function main(): Promise<void> {
  const first = createEngine({ store: store(), workflows: [wf], pollIntervalMs: 10 });
  await first.start(wf, undefined, { id: "r1" });
  // Executed with small results (270 steps of 2 MiB through the engine would take long),
  // then each result swapped for a 2 MiB one by SQL.
  while ((await first.getRun("r1"))?.status !== "waiting") {
    await new Promise((r) => setTimeout(r, 50));
  }
  await first.close();
  const s = store();
  await s.open({ clock: realClock });
  const pg = await import("pg");
  const c = new pg.default.Client({ connectionString: url });
  await c.connect();
  const swapped = await c.query(
    `UPDATE "${schema}".steps SET result = replace(result, $1, repeat('x', $2)) WHERE run_id = 'r1'`,
    [MARK, 2 * MIB],
  );
  await c.end();
  const journal = await s.loadJournal("r1");
  const loaded = journal.steps.reduce((n, st) => n + (st.result?.length ?? 0), 0);
  await s.close?.();

  const worker = createEngine({ store: store(), workflows: [wf], pollIntervalMs: 10 });
  await worker.sendEvent("r1", "go", 1);
  const resumed = await worker.handle("r1").result();
  const fork = await worker.fork("r1", { fromStep: `s${STEPS - 1}`, id: "f1" });
  await worker.sendEvent("f1", "go", 1);
  const forked = await fork.result();
  await worker.close();
  console.log(
    JSON.stringify({
      swapped: swapped.rowCount,
      steps: journal.steps.length,
      loaded,
      resumed,
      forked,
    }),
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`failed: ${e?.stack ?? e}`);
    process.exit(2);
  },
);
