// PostgreSQL: a turn's creates and releases travel as one statement; one the mark's triggers
// refuse for a plain payload sends every member again alone (isolatingFailures). Attacked
// here: the plain member beside members whose own outcome is something else again (a fence
// lost, a run already finished, a value PostgreSQL refuses, an id taken, a failed release
// that appends a failed call): each gets its own outcome, and nothing is applied twice (the
// statement that failed rolled back as a whole: release_runs raises out of its loop, the
// INSERT is one statement). On the store's own pool (autocommit, a lone create prepared)
// and on a caller's (each statement in a transaction).

import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import {
  type EncryptionKey,
  EncryptionKeyMissingError,
  encryptedStore,
  type Store,
  StoreError,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { NewRun, Release } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";

const url = await postgresTestUrl();
const key: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };
const claimBy = { workerId: "w1", leaseMs: 600_000 };

const newRun = (id: string, over: Partial<NewRun> = {}): NewRun => ({
  id,
  workflow: "wf",
  version: "1",
  input: "-1",
  budgetLimit: {},
  ...over,
});

describe.skipIf(!url)("PostgreSQL: a plain member among members that fail otherwise", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  /** A keyless store opened before the mark (its clock stands still: it never reads the
   *  mark again), on the store's own pool or a caller's, and a keyed one that marked it. */
  async function stores(own: boolean): Promise<{ keyless: Store; keyed: Store; raw: Store }> {
    const t = testSchema(base);
    cleanups.push(t.drop);
    let source: string | pg.Pool = base;
    if (!own) {
      const pool = new pg.Pool({ connectionString: base, max: 4 });
      cleanups.push(() => pool.end());
      source = pool;
    }
    const keyless = postgresStore(source, { schema: t.schema });
    await keyless.open({ clock: createVirtualClock() });
    cleanups.push(() => keyless.close());
    // The runs made before the mark, by the keyless store itself.
    const raw = postgresStore(base, { schema: t.schema });
    const keyed = encryptedStore(raw, { keys: [key] });
    return {
      keyless,
      raw,
      keyed: {
        ...keyed,
        open: async (o) => {
          await keyed.open(o);
          cleanups.push(() => keyed.close());
        },
      } as Store,
    };
  }

  for (const own of [true, false]) {
    const pool = own ? "own pool" : "caller's pool";

    it(`${pool}: a turn's releases each get their own outcome, each applied once`, async () => {
      const { keyless, keyed } = await stores(own);
      const made = new Map<string, { id: string; epoch: number }>();
      for (const id of ["plain", "waits", "stale", "finished", "huge", "failed", "enc"]) {
        made.set(id, (await keyless.createRun(newRun(`run_${id}`, { claimBy }))).run);
      }
      const at = (id: string) => made.get(id)!;
      const finished = at("finished");
      await keyless.releaseRun({
        runId: finished.id,
        epoch: finished.epoch,
        status: "completed",
        readyAt: null,
        output: "-1",
      });
      await keyed.open({ clock: createVirtualClock() });
      expect(await keyed.isMarkedEncrypted?.()).toBe(true);
      const release = (id: string, over: Partial<Release>): Release => ({
        runId: at(id).id,
        epoch: at(id).epoch,
        status: "waiting",
        readyAt: null,
        ...over,
      });
      const asked: Release[] = [
        release("plain", { status: "completed", output: '"plain"' }),
        release("waits", { waitingFor: ["go"] }),
        release("stale", { epoch: at("stale").epoch + 7 }),
        release("finished", { status: "paused" }),
        release("huge", { status: "pending", readyAt: 1e300 }),
        release("failed", { status: "failed", failedKeys: ["k1", "k2"] }),
        release("enc", { status: "completed", output: "cairn:enc:1:k1:abc" }),
      ];
      const out = await Promise.allSettled(asked.map((r) => keyless.releaseRun(r)));
      const [plain, waits, stale, done, huge, failed, enc] = out;
      expect(plain?.status).toBe("rejected");
      expect((plain as PromiseRejectedResult).reason).toBeInstanceOf(EncryptionKeyMissingError);
      expect(waits).toMatchObject({ status: "fulfilled", value: { ok: true } });
      expect(stale).toEqual({ status: "fulfilled", value: { ok: false, reason: "lease-lost" } });
      expect(done).toEqual({ status: "fulfilled", value: { ok: false, reason: "lease-lost" } });
      expect(huge?.status).toBe("rejected");
      expect((huge as PromiseRejectedResult).reason).toBeInstanceOf(StoreError);
      expect(failed).toMatchObject({ status: "fulfilled", value: { ok: true } });
      expect(enc).toMatchObject({ status: "fulfilled", value: { ok: true } });

      const now = async (id: string) => (await keyless.getRun(at(id).id))!;
      expect((await now("plain")).status).toBe("running");
      expect((await now("waits")).status).toBe("waiting");
      expect((await now("stale")).status).toBe("running");
      expect(await now("finished")).toMatchObject({ status: "completed", output: "-1" });
      expect((await now("huge")).status).toBe("running");
      expect(await now("failed")).toMatchObject({
        status: "failed",
        failedCalls: [
          { key: "k1", generation: 0 },
          { key: "k2", generation: 0 },
        ],
      });
      expect((await now("enc")).output).toBe("cairn:enc:1:k1:abc");
      // Each answer is the run as stored (but its input).
      for (const [i, o] of out.entries()) {
        if (o.status !== "fulfilled" || !o.value.ok) continue;
        const { input: _, ...stored } = await now(asked[i]!.runId.slice(4));
        expect(o.value.run).toEqual(stored);
      }
    });

    it(`${pool}: a turn's creates each get their own outcome, each made once`, async () => {
      const { keyless, keyed, raw } = await stores(own);
      await keyless.createRun(newRun("run_taken", { input: '"before the mark"' }));
      await keyed.open({ clock: createVirtualClock() });
      const asked: NewRun[] = [
        newRun("run_plain", { input: '{"secret":1}' }),
        newRun("run_bare"),
        newRun("run_taken"),
        newRun("run_nul", { workflow: "w\u0000f" }),
        newRun("run_claimed", { claimBy }),
        newRun("run_enc", { input: "cairn:enc:1:k1:abc" }),
      ];
      const out = await Promise.allSettled(asked.map((r) => keyless.createRun(r)));
      const [plain, bare, taken, nul, claimed, enc] = out;
      expect((plain as PromiseRejectedResult).reason).toBeInstanceOf(EncryptionKeyMissingError);
      expect(bare).toMatchObject({ status: "fulfilled", value: { created: true } });
      expect(taken).toMatchObject({
        status: "fulfilled",
        value: { created: false, run: { input: '"before the mark"' } },
      });
      expect((nul as PromiseRejectedResult).reason).toBeInstanceOf(StoreError);
      expect((nul as PromiseRejectedResult).reason.message).toMatch(/NUL/);
      expect(claimed).toMatchObject({
        status: "fulfilled",
        value: { created: true, run: { status: "running", leaseOwner: "w1" } },
      });
      expect(enc).toMatchObject({ status: "fulfilled", value: { created: true } });
      const ids = (await raw.listRuns({})).map((r) => r.id).sort();
      expect(ids).toEqual(["run_bare", "run_claimed", "run_enc", "run_taken"]);
      for (const [i, o] of out.entries()) {
        if (o.status !== "fulfilled") continue;
        expect(o.value.run).toEqual(await raw.getRun(asked[i]!.id));
      }
    });
  }
});
