// A parent that crashed between its child's create and its own record of the call (the
// child's intent) adopts that child when replayed, if it is still this call's child. The
// child's stored input is what its input schema made of the input, on its version: through
// a schema, or on another version, the input handed now could not be compared with it, and
// a replay handing another input adopted the old child: the parent took a result computed
// from another input. The child run now keeps a digest of the input as handed (migration:
// SQLite 13, PostgreSQL 19; encrypted by encryptedStore). A child that does not match is
// left as it is (the parent resumed on its first code takes its result), and the error
// names it and says how to cancel it, where before nothing said it was still running.

import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  type AnyWorkflow,
  createEngine,
  NonDeterminismError,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { encryptedStore } from "../src/store/encrypted-store.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { RunWrite } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import {
  advanceUntil,
  BACKENDS,
  type Backend,
  type Harness,
  pgUrl,
  useHarness,
} from "./helpers/engines.js";
import { testSchema, withClient } from "./helpers/postgres.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

/** Whether a store write carries the intent of a ctx.child call. */
function writesChildIntent(args: unknown[]): boolean {
  return (args[0] as RunWrite[]).some((w) => w.intents?.some((i) => i.kind === "child"));
}

/** Runs `before` (the parent first) until its child "p/kid" is created and the parent's
 *  intent is lost with the engine; a new engine on `after` then takes the parent over. */
async function crashThenReplay(
  h: Harness,
  before: AnyWorkflow[],
  after: AnyWorkflow[],
  between?: () => Promise<void>,
) {
  const store = crashableStore(h.store(), {
    crashBefore: (call) => call.verb === "appendRecords" && writesChildIntent(call.args),
  });
  const e1 = createEngine({ store, workflows: before, clock: h.clock, pollIntervalMs: 10 });
  await e1.start(before[0]!, 1, { id: "p" });
  await until(async () => store.crashed, "crash before the child's intent");
  await store.settled();
  await between?.();
  const e2 = h.engine(after);
  const out = advanceUntil(h.clock, e2.handle("p").result(), 1_000, 200);
  out.catch(() => {});
  return { out, engine: e2 };
}

describe.each(BACKENDS)(
  "%s: a child adopted after a crash, through its input schema",
  (backend) => {
    const harness = useHarness(backend);

    function kidOf(version: string) {
      return workflow(
        { name: "schema-kid", version, input: z.object({ n: z.number() }) },
        async (ctx, x: { n: number }) => {
          await ctx.sleep("nap", "1s");
          return x.n * 10;
        },
      );
    }
    function parentHanding(n: number, kid: AnyWorkflow) {
      return workflow({ name: "schema-parent", version: "1" }, async (ctx) =>
        ctx.child("kid", kid as never, { n }),
      );
    }

    it("a call that now hands another input fails the parent, naming the run, key and child", async () => {
      const h = harness();
      const kid = kidOf("1");
      const { out, engine } = await crashThenReplay(
        h,
        [parentHanding(1, kid), kid],
        [parentHanding(2, kid), kid],
      );
      // An uninterrupted run of the new code returns 20; the old child returns 10.
      await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
      await expect(out).rejects.toThrow(/Run "p".*key "kid".*another input/);
      // The error says what became of the old child, and what to do with it.
      await expect(out).rejects.toThrow(/Child run "p\/kid" is left as it is.*engine.cancel/);
      expect((await engine.getRun("p/kid"))?.status).not.toBe("canceled");
      // Left as it is, the child serves the first remedy: the parent resumed on the code it
      // started on takes that child's result.
      await engine.close();
      const old = h.engine([parentHanding(1, kid), kid]);
      await old.resume("p");
      expect(await advanceUntil(h.clock, old.handle("p").result(), 1_000, 200)).toBe(10);
    });

    it("the same call adopts the child (a schema's default drawn afresh is no other input)", async () => {
      const h = harness();
      let drawn = 0;
      const kid = workflow(
        {
          name: "default-kid",
          version: "1",
          input: z.object({ n: z.number(), requestId: z.number().default(() => ++drawn) }),
        },
        async (ctx, x: { n: number; requestId: number }) => {
          await ctx.sleep("nap", "1s");
          return [x.n, x.requestId];
        },
      );
      const parent = workflow({ name: "default-parent", version: "1" }, async (ctx) =>
        ctx.child("kid", kid as never, { n: 3 }),
      );
      const { out } = await crashThenReplay(h, [parent, kid], [parent, kid]);
      expect(await out).toEqual([3, 1]);
    });
  },
);

describe.each(BACKENDS)("%s: a child adopted after a crash, of another version now", (backend) => {
  const harness = useHarness(backend);

  function kidOf(version: string) {
    return workflow({ name: "versioned-kid", version }, async (ctx, n: number) => {
      await ctx.sleep("nap", "1s");
      return n * 10;
    });
  }
  function parentHanding(n: number, kid: AnyWorkflow) {
    return workflow({ name: "versioned-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid as never, n),
    );
  }

  it("a call that now hands another input to the new version fails the parent", async () => {
    const h = harness();
    const v1 = kidOf("1");
    const v2 = kidOf("2");
    const { out } = await crashThenReplay(
      h,
      [parentHanding(1, v1), v1],
      [parentHanding(2, v2), v1, v2],
    );
    await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
    await expect(out).rejects.toThrow(/Run "p".*key "kid".*version "1".*another input/);
  });

  it("the same input adopts the child on the version it started on, as a recorded call does", async () => {
    const h = harness();
    const v1 = kidOf("1");
    const v2 = kidOf("2");
    const { out, engine } = await crashThenReplay(
      h,
      [parentHanding(4, v1), v1],
      [parentHanding(4, v2), v1, v2],
    );
    expect(await out).toBe(40);
    expect((await engine.getRun("p/kid"))?.version).toBe("1");
  });
});

/** Storage on `backend` that can be put back to the schema before the digest was kept, its
 *  runs kept (what an upgrade of cairn finds), for a Harness over it. */
function revertibleStorage(backend: Backend) {
  const cleanups: Array<() => Promise<void> | void> = [];
  const clock = createVirtualClock();
  let store: () => Store;
  let revert: () => Promise<void>;
  if (backend === "sqlite") {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    store = () => sqliteStore(db.path);
    revert = async () => {
      const raw = new Database(db.path);
      raw.exec(
        // Migration 17's index swap and 18's dropped index undone too.
        "CREATE INDEX runs_created ON runs (created_at, id); " +
          "DROP INDEX runs_ready_idle; " +
          "CREATE INDEX runs_ready ON runs (ready_at) WHERE ready_at IS NOT NULL; " +
          "CREATE INDEX runs_lease_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL; " +
          "DROP INDEX runs_held_by; " +
          "ALTER TABLE runs DROP COLUMN handed_input_digest; ALTER TABLE runs DROP COLUMN held_by; " +
          "ALTER TABLE runs DROP COLUMN held_until; DROP TABLE store_marks; " +
          "DELETE FROM schema_version WHERE version > 12",
      );
      raw.close();
    };
  } else {
    const url = pgUrl!;
    const { schema, drop } = testSchema(url);
    cleanups.push(drop);
    store = () => postgresStore(url, { schema });
    revert = () =>
      withClient(url, async (c) => {
        // Back to schema 18: migration 20's write tokens, 21's index, 22's holds (23's index
        // with them), 24's store marks, 25's events index and 26's runs indexes go too;
        // 27's dropped foreign key comes back.
        await c.query(
          `ALTER TABLE "${schema}".runs DROP COLUMN handed_input_digest, DROP COLUMN create_token,
             DROP COLUMN held_by, DROP COLUMN held_until`,
        );
        await c.query(`ALTER TABLE "${schema}".events DROP COLUMN send_token`);
        await c.query(`ALTER TABLE "${schema}".run_streams DROP COLUMN append_token`);
        await c.query(`DROP INDEX "${schema}".steps_run_seq`);
        await c.query(`DROP TABLE "${schema}".store_marks`);
        await c.query(`DROP INDEX "${schema}".events_unconsumed_by_name`);
        // 26's runs indexes back to migration 1's.
        await c.query(`DROP INDEX "${schema}".runs_ready_idle`);
        await c.query(
          `CREATE INDEX runs_ready_at ON "${schema}".runs (ready_at) WHERE ready_at IS NOT NULL`,
        );
        await c.query(
          `CREATE INDEX runs_lease_owner ON "${schema}".runs (lease_owner)
            WHERE lease_owner IS NOT NULL`,
        );
        // 27 dropped steps' foreign key to runs.
        await c.query(
          `ALTER TABLE "${schema}".steps ADD CONSTRAINT steps_run_id_fkey FOREIGN KEY (run_id)
            REFERENCES "${schema}".runs (id) ON DELETE CASCADE`,
        );
        await c.query(`DELETE FROM "${schema}".schema_version WHERE version > 18`);
      });
  }
  const h: Harness = {
    backend,
    clock,
    store,
    engine(workflows, opts = {}) {
      const e = createEngine({ store: store(), workflows, clock, pollIntervalMs: 10, ...opts });
      cleanups.push(() => e.close());
      return e;
    },
  };
  return {
    h,
    revert,
    cleanup: async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    },
  };
}

describe.each(BACKENDS)(
  "%s: upgraded with a child created before the digest was kept",
  (backend) => {
    let cleanup: (() => Promise<void>) | undefined;
    afterEach(async () => {
      await cleanup?.();
      cleanup = undefined;
    });

    const kid = workflow({ name: "legacy-kid", version: "1" }, async (ctx, n: number) => {
      await ctx.sleep("nap", "1s");
      return n * 10;
    });
    function parentHanding(n: number) {
      return workflow({ name: "legacy-parent", version: "1" }, async (ctx) =>
        ctx.child("kid", kid, n),
      );
    }

    /** The crash under this cairn, then the schema and its runs as the previous one left
     *  them (no digest), then this cairn opens it again (migrating) and replays `after`. */
    async function crashUpgradeReplay(after: AnyWorkflow) {
      const s = revertibleStorage(backend);
      cleanup = s.cleanup;
      const { out } = await crashThenReplay(s.h, [parentHanding(1), kid], [after, kid], s.revert);
      return { out, h: s.h };
    }

    it("the same call adopts it, its input compared as stored", async () => {
      const { out, h } = await crashUpgradeReplay(parentHanding(1));
      expect(await out).toBe(10);
      const store = h.store();
      await store.open({ clock: h.clock });
      expect((await store.getRun("p/kid"))?.handedInputDigest).toBeNull();
      await store.close();
    });

    it("a call that now hands another input still fails the parent", async () => {
      const { out } = await crashUpgradeReplay(parentHanding(2));
      await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
      await expect(out).rejects.toThrow(/key "kid".*another input/);
    });
  },
);

describe("through encryptedStore: a child's digest", () => {
  const keys = [{ id: "k1", key: Buffer.alloc(32, 7) }];

  it("is stored encrypted, and compared decrypted", async () => {
    const db = tempDbPath();
    const clock = createVirtualClock();
    const h: Harness = {
      backend: "sqlite",
      clock,
      store: () => encryptedStore(sqliteStore(db.path), { keys }),
      engine(workflows) {
        return createEngine({ store: h.store(), workflows, clock, pollIntervalMs: 10 });
      },
    };
    const kid = workflow(
      { name: "enc-schema-kid", version: "1", input: z.object({ n: z.number() }) },
      async (ctx, x: { n: number }) => {
        await ctx.sleep("nap", "1s");
        return x.n * 10;
      },
    );
    const parentHanding = (n: number) =>
      workflow({ name: "enc-schema-parent", version: "1" }, async (ctx) =>
        ctx.child("kid", kid as never, { n }),
      );
    let engine: Awaited<ReturnType<typeof crashThenReplay>>["engine"] | undefined;
    try {
      const res = await crashThenReplay(h, [parentHanding(1), kid], [parentHanding(2), kid]);
      engine = res.engine;
      await expect(res.out).rejects.toThrow(/key "kid".*another input/);
      const raw = new Database(db.path, { readonly: true });
      const row = raw
        .prepare("SELECT handed_input_digest AS d FROM runs WHERE id = 'p/kid'")
        .get() as { d: string };
      raw.close();
      expect(row.d).toMatch(/^cairn:enc:/);
    } finally {
      await engine?.close();
      db.cleanup();
    }
  });
});

describe("a call that no longer matches its recorded, unfinished child", () => {
  const harness = useHarness("sqlite");

  it("fails the parent saying the child is left as it is; a child that ended is not mentioned", async () => {
    const h = harness();
    const code = { n: 1 };
    const kid = workflow({ name: "idle-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
      return 0;
    });
    const quick = workflow({ name: "quick-kid", version: "1" }, async (_ctx, n: number) => n);
    const parent = workflow({ name: "ticking-parent", version: "1" }, async (ctx) => {
      const [got] = await Promise.all([ctx.child("kid", kid, code.n), ctx.sleep("tick", "1s")]);
      return got;
    });
    const done = workflow({ name: "done-parent", version: "1" }, async (ctx) => {
      const got = await ctx.child("kid", quick, code.n);
      await ctx.waitForEvent("go");
      return got;
    });
    const e = h.engine([parent, kid, done, quick]);
    await e.start(parent, undefined, { id: "p" });
    await e.start(done, undefined, { id: "d" });
    await until(async () => (await e.getRun("d"))?.waitingFor?.includes("go"), "d waiting");
    await until(async () => (await e.getRun("p/kid"))?.status === "waiting", "child waiting");
    code.n = 2;
    // The sleep's end replays the parent: its child call, recorded as begun, hands another input.
    const out = advanceUntil(h.clock, e.handle("p").result(), 1_000, 20);
    await expect(out).rejects.toThrow(
      /key "kid".*another input.*Child run "p\/kid" is left as it is/,
    );
    expect((await e.getRun("p/kid"))?.status).toBe("waiting");
    await e.sendEvent("d", "go", null);
    const ended = e.handle("d").result();
    await expect(ended).rejects.toThrow(/key "kid".*another input/);
    await expect(ended).rejects.not.toThrow(/left as it is/);
  });
});
