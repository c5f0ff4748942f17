// PostgreSQL: a process without keys that opened the store before another marked it encrypted
// writes plain text until it reads the mark (about a second; never, on a clock that stands
// still), and the mark's triggers refuse it in the database. The creates and the releases
// asked for in one turn go as one statement: one plain member made the triggers refuse the
// whole statement, and every member failed with it (a suspension, which holds no payload,
// failed for its neighbour's plain output). Each member is now sent again alone, and only the
// plain one fails.

import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import {
  type EncryptionKey,
  EncryptionKeyMissingError,
  encryptedStore,
  type Store,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { NewRun } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";

const url = await postgresTestUrl();
const key: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

describe.skipIf(!url)("PostgreSQL: one plain member of a turn's statement", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  /** A keyless store opened before the mark (it believes the store unmarked: its clock never
   *  moves, so it never reads the mark again), and a keyed one that marked it since. */
  async function stores(): Promise<{ keyless: Store; keyed: Store }> {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const keyless = postgresStore(base, { schema: t.schema });
    await keyless.open({ clock: createVirtualClock() });
    cleanups.push(() => keyless.close());
    const keyed = encryptedStore(postgresStore(base, { schema: t.schema }), { keys: [key] });
    await keyed.open({ clock: createVirtualClock() });
    cleanups.push(() => keyed.close());
    expect(await keyed.isMarkedEncrypted?.()).toBe(true);
    return { keyless, keyed };
  }

  const newRun = (id: string, over: Partial<NewRun> = {}): NewRun => ({
    id,
    workflow: "wf",
    version: "1",
    input: "-1",
    budgetLimit: {},
    ...over,
  });

  it("a turn's releases: the plain completion fails alone, the suspension beside it lands", async () => {
    const { keyless, keyed } = await stores();
    const claimBy = { workerId: "w1", leaseMs: 600_000 };
    const { run: done } = await keyed.createRun(newRun("run_done", { claimBy }));
    const { run: waits } = await keyed.createRun(newRun("run_waits", { claimBy }));
    // One turn: one release_runs statement.
    const [completed, suspended] = await Promise.allSettled([
      keyless.releaseRun({
        runId: done.id,
        epoch: done.epoch,
        status: "completed",
        readyAt: null,
        output: '"plain"',
      }),
      keyless.releaseRun({
        runId: waits.id,
        epoch: waits.epoch,
        status: "waiting",
        readyAt: null,
        waitingFor: ["go"],
      }),
    ]);
    expect(completed.status).toBe("rejected");
    expect((completed as PromiseRejectedResult).reason).toBeInstanceOf(EncryptionKeyMissingError);
    expect((completed as PromiseRejectedResult).reason.message).toContain(
      'the output of run "run_done"',
    );
    expect(suspended).toMatchObject({ status: "fulfilled", value: { ok: true } });
    expect((await keyed.getRun(waits.id))?.status).toBe("waiting");
    expect((await keyed.getRun(done.id))?.status).toBe("running");
  });

  it("a turn's creates: the plain input fails alone, the run without input is created", async () => {
    const { keyless, keyed } = await stores();
    const [plain, bare] = await Promise.allSettled([
      keyless.createRun(newRun("run_plain", { input: '{"secret":1}' })),
      keyless.createRun(newRun("run_bare")),
    ]);
    expect(plain.status).toBe("rejected");
    expect((plain as PromiseRejectedResult).reason).toBeInstanceOf(EncryptionKeyMissingError);
    expect(bare).toMatchObject({ status: "fulfilled", value: { created: true } });
    expect(await keyed.getRun("run_plain")).toBeUndefined();
    expect((await keyed.getRun("run_bare"))?.status).toBe("pending");
  });
});
