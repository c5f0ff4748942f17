// PostgreSQL creates and releases no longer send a run's payloads back (RUN_COLUMNS_BUT_PAYLOADS):
// the answers are built from what the caller sent, the output read back only on a retry that
// may find its earlier try's release. Attacked here: on every path a release takes (a lone
// completion's prepared UPDATE, a turn's release_runs on the store's own pool and on a
// caller's, a child's release with events, a release a cancel asked meanwhile turns into
// "canceled", a retry after a lost commit), with outputs that could come back changed (JSON
// round trip through jsonb, 16 MB, characters JSON escapes), plain and encrypted: the answer
// is the run as stored but its input, and a create that finds its id taken answers the input
// stored, not the one it sent.

import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { type EncryptionKey, encryptedStore, type Store } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { NewRun, Release, ReleasedRun, RunRecord } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { commitLosingPool } from "./helpers/commit-losing-pool.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";

const url = await postgresTestUrl();
const key: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };
const claimBy = { workerId: "w1", leaseMs: 600_000 };

/** Outputs that a JSON round trip or a text column could change if any path rewrote them. */
const HOSTILE: Record<string, string> = {
  astral: JSON.stringify("😀𝄞 \u{10ffff}"),
  separators: JSON.stringify("a\u2028b\u2029c\u0085d\ufeff"),
  escapesAsText: String.raw`"\u0000 \ud800 \\ \" \n"`,
  controls: JSON.stringify("\u0001\u001f\u007f\t\r\n"),
  undefinedText: "-1",
  empty: "",
  spaces: "  \n ",
  big: JSON.stringify("z".repeat(16 * 1024 * 1024)),
};

const butInput = (run: ReleasedRun | RunRecord | undefined) => {
  if (run === undefined) return undefined;
  const { input: _, ...rest } = run as RunRecord;
  return rest;
};

describe.skipIf(!url)("PostgreSQL: a create's and a release's answer is the run as stored", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  type Kind = "own pool" | "caller's pool" | "encrypted";
  async function openStore(kind: Kind) {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const s = t.schema;
    const losing = commitLosingPool(base);
    cleanups.push(() => losing.pool.end());
    const plain = postgresStore(kind === "caller's pool" ? losing.pool : base, { schema: s });
    const store: Store = kind === "encrypted" ? encryptedStore(plain, { keys: [key] }) : plain;
    await store.open({ clock: createVirtualClock() });
    cleanups.push(() => store.close());
    return { store, ...losing };
  }

  const newRun = (id: string, over: Partial<NewRun> = {}): NewRun => ({
    id,
    workflow: "wf",
    version: "1",
    input: JSON.stringify({ id }),
    budgetLimit: {},
    ...over,
  });

  async function answeredAsStored(store: Store, releases: Release[]): Promise<void> {
    const outs = await Promise.all(releases.map((r) => store.releaseRun(r)));
    for (const [i, out] of outs.entries()) {
      const r = releases[i]!;
      expect(out.ok, r.runId).toBe(true);
      if (!out.ok) continue;
      const stored = await store.getRun(r.runId);
      expect(butInput(out.run)).toEqual(butInput(stored));
      if (r.output !== undefined && out.run.status === r.status) {
        expect(out.run.output === r.output, r.runId).toBe(true);
      }
    }
  }

  for (const kind of ["own pool", "caller's pool", "encrypted"] as const) {
    it(`${kind}: hostile outputs, lone and in one turn, come back as stored`, async () => {
      const { store } = await openStore(kind);
      const names = Object.keys(HOSTILE);
      const made = await Promise.all(
        names.map((n) => store.createRun(newRun(`run_${n}`, { claimBy }))),
      );
      const release = (i: number): Release => ({
        runId: made[i]!.run.id,
        epoch: made[i]!.run.epoch,
        status: "completed",
        readyAt: null,
        output: HOSTILE[names[i]!]!,
      });
      // Each alone (the lone completion's UPDATE on the own pool), then the rest in one turn.
      await answeredAsStored(store, [release(0)]);
      await answeredAsStored(store, [release(names.length - 1)]);
      await answeredAsStored(
        store,
        names.slice(1, -1).map((_, k) => release(k + 1)),
      );
    });

    it(`${kind}: a release turned canceled by a cancel asked meanwhile, and a child's with events`, async () => {
      const { store } = await openStore(kind);
      const { run: parent } = await store.createRun(newRun("run_parent", { claimBy }));
      const { run: child } = await store.createRun(
        newRun("run_child", { claimBy, parentId: parent.id }),
      );
      const { run: asked } = await store.createRun(newRun("run_asked", { claimBy }));
      expect((await store.requestCancel(asked.id, "stop it")).state).toBe("requested");
      await answeredAsStored(store, [
        {
          runId: asked.id,
          epoch: asked.epoch,
          status: "waiting",
          readyAt: null,
          waitingFor: ["go"],
        },
        {
          runId: parent.id,
          epoch: parent.epoch,
          status: "waiting",
          readyAt: null,
          waitingFor: ["cairn.child:run_child"],
        },
      ]);
      expect((await store.getRun(asked.id))?.status).toBe("canceled");
      await answeredAsStored(store, [
        {
          runId: child.id,
          epoch: child.epoch,
          status: "completed",
          readyAt: null,
          output: HOSTILE.separators!,
          events: [{ runId: parent.id, name: "cairn.child:run_child", payload: '"r"' }],
        },
      ]);
      expect((await store.getRun(parent.id))?.readyAt).not.toBeNull();
    });
  }

  for (const kind of ["caller's pool", "encrypted"] as const) {
    it(`${kind}: a release whose commit's answer was lost answers the output stored`, async () => {
      const t = testSchema(base);
      cleanups.push(t.drop);
      const losing = commitLosingPool(base);
      cleanups.push(() => losing.pool.end());
      const plain = postgresStore(losing.pool, { schema: t.schema });
      const store: Store = kind === "encrypted" ? encryptedStore(plain, { keys: [key] }) : plain;
      await store.open({ clock: createVirtualClock() });
      cleanups.push(() => store.close());
      const runs = await Promise.all(
        ["run_a", "run_b", "run_c"].map((id) => store.createRun(newRun(id, { claimBy }))),
      );
      // A lone completion, then a turn's two releases (one statement), each commit's answer
      // lost: the retry finds the runs released and reads back the output stored.
      for (const group of [runs.slice(0, 1), runs.slice(1)]) {
        losing.loseAfter((sql) => sql.includes("release_runs"));
        const lostBefore = losing.lost();
        await answeredAsStored(
          store,
          group.map(({ run }, i) => ({
            runId: run.id,
            epoch: run.epoch,
            status: i === 1 ? "paused" : "completed",
            readyAt: null,
            output: i === 1 ? HOSTILE.separators! : HOSTILE.astral!,
          })),
        );
        expect(losing.lost()).toBe(lostBefore + 1);
      }
      if (kind === "encrypted") {
        // Stored encrypted: the answer's output was decrypted, not the text sent back.
        const raw = postgresStore(base, { schema: t.schema });
        await raw.open({ clock: createVirtualClock() });
        cleanups.push(() => raw.close());
        expect((await raw.getRun("run_a"))?.output).toMatch(/^cairn:enc:/);
      }
    });
  }

  it("a create that finds its id taken answers the input stored, plain and encrypted", async () => {
    const { store } = await openStore("own pool");
    const { store: keyed } = await openStore("encrypted");
    await store.createRun(newRun("run_plain", { input: '"first"' }));
    const again = await store.createRun(newRun("run_plain", { input: '"second"' }));
    expect(again).toMatchObject({ created: false, run: { input: '"first"' } });
    // Two at once in one turn (one INSERT, then the read back of the one it did not make).
    const [x, y] = await Promise.all([
      keyed.createRun(newRun("run_enc", { input: '"mine"' })),
      keyed.createRun(newRun("run_enc", { input: '"theirs"' })),
    ]);
    expect(x).toMatchObject({ created: true, run: { input: '"mine"' } });
    expect(y).toMatchObject({ created: false, run: { input: '"mine"' } });
    expect((await keyed.getRun("run_enc"))?.input).toBe('"mine"');
  });

  it("an output PostgreSQL cannot hold (a NUL) fails its own release, named, and stores nothing", async () => {
    const { store } = await openStore("own pool");
    const made = await Promise.all(
      ["run_nul", "run_ok"].map((id) => store.createRun(newRun(id, { claimBy }))),
    );
    const [nul, ok] = await Promise.allSettled(
      made.map(({ run }, i) =>
        store.releaseRun({
          runId: run.id,
          epoch: run.epoch,
          status: "completed",
          readyAt: null,
          output: i === 0 ? '"a\u0000b"' : '"fine"',
        }),
      ),
    );
    expect(nul?.status).toBe("rejected");
    expect(String((nul as PromiseRejectedResult).reason)).toMatch(/NUL/);
    expect(ok).toMatchObject({ status: "fulfilled", value: { ok: true } });
    expect((await store.getRun("run_nul"))?.status).toBe("running");
    await expect(
      store.releaseRun({
        runId: "run_nul",
        epoch: made[0]!.run.epoch,
        status: "completed",
        readyAt: null,
        output: '"\ud800"',
      }),
    ).rejects.toThrow(/releaseRun: run "run_nul": output contains a lone surrogate/);
  });
});
