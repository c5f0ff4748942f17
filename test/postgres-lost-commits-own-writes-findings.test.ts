// PostgreSQL: a write whose COMMIT went through but whose answer was lost (the connection
// dropped right after the server committed). Each verb's retry now tells its own earlier
// write from another's by a token of the call written in the same transaction
// (migration 20), and answers what the lost try would have: before, a create claimed by a
// worker between its lost try and its retry was answered created=false to the call that
// made it, and sendEvent, forkRun and appendStream failed with "outcome unknown".

import { afterEach, describe, expect, it } from "vitest";
import { postgresStore } from "../src/postgres.js";
import { createVirtualClock } from "../src/testing/index.js";
import { commitLosingPool } from "./helpers/commit-losing-pool.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";

const newRun = (id: string, workflow = "f") => ({
  id,
  workflow,
  version: "1",
  input: "null",
  budgetLimit: {},
});

describe.skipIf(!pgUrl)("PostgreSQL: a write whose commit's answer is lost, retried", () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function openStore() {
    const { schema, drop } = testSchema(pgUrl!);
    cleanups.push(drop);
    const losing = commitLosingPool(pgUrl!);
    cleanups.push(() => losing.pool.end());
    const store = postgresStore(losing.pool, { schema });
    const clock = createVirtualClock();
    await store.open({ clock });
    cleanups.push(() => store.close());
    // Another process on the same schema: its writes are not lost.
    const other = postgresStore(pgUrl!, { schema });
    await other.open({ clock });
    cleanups.push(() => other.close());
    return { store, other, ...losing };
  }

  it("createRun: a run claimed before the retry is still this call's own (created=true)", async () => {
    const { store, other, loseAfter, lost } = await openStore();
    loseAfter(
      (sql) => sql.includes("jsonb_to_recordset"),
      async () => {
        const claimed = await other.claimRuns({
          workerId: "w",
          workflows: ["f@1"],
          limit: 1,
          leaseMs: 1_000,
        });
        expect(claimed.map((c) => c.run.id)).toEqual(["mine"]);
      },
    );
    const made = await store.createRun(newRun("mine"));
    expect(lost()).toBe(1);
    expect(made.created).toBe(true);
    expect((await store.createRun(newRun("mine"))).created).toBe(false);
  });

  it("sendEvent: answers the event the lost try stored, stored once", async () => {
    const { store, loseAfter, lost } = await openStore();
    await store.createRun(newRun("r"));
    loseAfter((sql) => /^INSERT INTO \S+\.events /.test(sql));
    const sent = await store.sendEvent({ runId: "r", name: "go", payload: "1" });
    expect(lost()).toBe(1);
    expect(sent).toMatchObject({ ok: true, duplicate: false });
    const events = await store.listEvents("r");
    expect(events.map((e) => e.name)).toEqual(["go"]);
    if (sent.ok) expect(sent.event.seq).toBe(events[0]?.seq);
  });

  it("sendEvent with an idempotency key: the lost try's event is this call's (duplicate=false)", async () => {
    const { store, loseAfter, lost } = await openStore();
    await store.createRun(newRun("r"));
    loseAfter((sql) => /^INSERT INTO \S+\.events /.test(sql));
    const sent = await store.sendEvent({
      runId: "r",
      name: "go",
      payload: "1",
      idempotencyKey: "k",
    });
    expect(lost()).toBe(1);
    expect(sent).toMatchObject({ ok: true, duplicate: false });
    const again = await store.sendEvent({
      runId: "r",
      name: "go",
      payload: "1",
      idempotencyKey: "k",
    });
    expect(again).toMatchObject({ ok: true, duplicate: true });
    expect(await store.listEvents("r")).toHaveLength(1);
  });

  it("sendEvent: when every retry fails after the lost commit, the error says the outcome is unknown", async () => {
    const { store, loseAfter, lost, unreachableAfterLoss } = await openStore();
    await store.createRun(newRun("r"));
    loseAfter((sql) => /^INSERT INTO \S+\.events /.test(sql));
    unreachableAfterLoss();
    // "the call can be repeated" would be false: a repeat (another call) stores it twice.
    await expect(store.sendEvent({ runId: "r", name: "go", payload: "1" })).rejects.toThrow(
      /while committing sendEvent: whether it took effect is unknown/,
    );
    expect(lost()).toBe(1);
  });

  it("forkRun: answers the fork the lost try made (created=true), made once", async () => {
    const { store, loseAfter, lost } = await openStore();
    await store.createRun(newRun("source"));
    loseAfter((sql) => sql.includes("row_number() OVER")); // the fork copying attempts
    const fork = await store.forkRun({ sourceId: "source", run: newRun("fork"), copy: [] });
    expect(lost()).toBe(1);
    expect(fork.created).toBe(true);
    expect(fork.run.id).toBe("fork");
    const again = await store.forkRun({ sourceId: "source", run: newRun("fork"), copy: [] });
    expect(again.created).toBe(false);
  });

  it("appendStream: answers the offset the lost try appended at, its chunks stored once", async () => {
    const { store, loseAfter, lost } = await openStore();
    await store.createRun(newRun("r"));
    await store.appendStream({ runId: "r", chunks: ["a"] });
    loseAfter((sql) => /INSERT INTO \S+\.run_streams /.test(sql));
    const out = await store.appendStream({ runId: "r", chunks: ["b", "c"] });
    expect(lost()).toBe(1);
    expect(out).toEqual({ ok: true, offset: 1 });
    const chunks = await store.readStream({ runId: "r", from: 0 });
    expect(chunks.map((c) => c.data)).toEqual(["a", "b", "c"]);
    expect(await store.appendStream({ runId: "r", chunks: ["d"] })).toEqual({
      ok: true,
      offset: 3,
    });
  });
});
