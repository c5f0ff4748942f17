// Workspace objects on PostgreSQL when retention races a checkpoint (the store contract
// covers each verb alone): a put that refers to an object a concurrent deleteRun is
// deleting answers "missing" (the engine then sends the content again); a deleteRun that
// meets a reference committed meanwhile runs again and keeps the object. Either way no
// reference is left to an object that is gone.

import { afterEach, describe, expect, it } from "vitest";
import { postgresStore } from "../src/postgres.js";
import type { Store } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema, withClient } from "./helpers/postgres.js";
import { until } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function open(): Promise<{ store: Store; schema: string }> {
  const { schema, drop } = testSchema(pgUrl!);
  const store = postgresStore(pgUrl!, { schema, poolSize: 3 });
  await store.open({ clock: createVirtualClock() });
  cleanups.push(drop, () => store.close());
  return { store, schema };
}

async function started(store: Store, id: string) {
  await store.createRun({ id, workflow: "w", version: "1", input: "1", budgetLimit: {} });
  const [c] = await store.claimRuns({
    workerId: `wk-${id}`,
    workflows: ["w@1"],
    limit: 1,
    leaseMs: 60_000,
  });
  if (!c) throw new Error(`${id} not claimed`);
  return c.run;
}

const blob = (text: string) => ({
  hash: Buffer.from(text).toString("hex").padEnd(16, "0"),
  kind: "blob" as const,
  size: text.length,
  data: new TextEncoder().encode(text),
});

/** Until a session of this test's schema waits for a lock. */
function lockWait(schema: string): Promise<unknown> {
  return until(
    () =>
      withClient(pgUrl!, async (c) => {
        const r = await c.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`,
          [schema],
        );
        return (r.rows[0] as { n: number }).n > 0;
      }),
    "a statement waiting for a lock",
  );
}

describe.runIf(pgUrl)("workspace objects and retention racing on PostgreSQL", () => {
  it("a put that refers to an object being deleted answers missing", async () => {
    const { store, schema } = await open();
    const a = await started(store, "a");
    const b = await started(store, "b");
    const x = blob("held by a only");
    expect(
      await store.putWorkspaceObjects({ runId: a.id, epoch: a.epoch, objects: [x], refs: [] }),
    ).toEqual({
      ok: true,
    });
    await withClient(pgUrl!, async (gc) => {
      // A retention transaction, half done: a's refs and the object deleted, not committed.
      await gc.query("BEGIN");
      await gc.query(`DELETE FROM "${schema}".workspace_refs WHERE run_id = 'a'`);
      await gc.query(`DELETE FROM "${schema}".workspace_objects WHERE hash = $1`, [x.hash]);
      const put = store.putWorkspaceObjects({
        runId: b.id,
        epoch: b.epoch,
        objects: [],
        refs: [x.hash],
      });
      await lockWait(schema);
      await gc.query("COMMIT");
      expect(await put).toEqual({ ok: false, reason: "missing", hashes: [x.hash] });
    });
    expect(await store.missingWorkspaceObjects([x.hash])).toEqual([x.hash]);
    // Sent again, it is stored and held by b.
    expect(
      await store.putWorkspaceObjects({ runId: b.id, epoch: b.epoch, objects: [x], refs: [] }),
    ).toEqual({
      ok: true,
    });
  });

  it("a deleteRun that meets a reference committed meanwhile keeps the object", async () => {
    const { store, schema } = await open();
    const a = await started(store, "a");
    await started(store, "b"); // the run whose checkpoint refers to the object
    const x = blob("shared once b refers to it");
    await store.putWorkspaceObjects({ runId: a.id, epoch: a.epoch, objects: [x], refs: [] });
    await store.releaseRun({
      runId: a.id,
      epoch: a.epoch,
      status: "completed",
      readyAt: null,
      output: "1",
    });
    await withClient(pgUrl!, async (writer) => {
      // b's checkpoint, half done: its ref inserted (locking the object), not committed.
      await writer.query("BEGIN");
      await writer.query(`INSERT INTO "${schema}".workspace_refs (run_id, hash) VALUES ('b', $1)`, [
        x.hash,
      ]);
      const gone = store.deleteRun(a.id);
      await lockWait(schema);
      await writer.query("COMMIT");
      expect(await gone).toEqual({ deleted: true, objects: 0, bytes: 0 });
    });
    expect(await store.missingWorkspaceObjects([x.hash])).toEqual([]);
    expect(await store.getRun(a.id)).toBeUndefined();
  });
});
