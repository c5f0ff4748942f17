// An execution reads the payload of an event only when a wait takes it: a run waiting for
// "approve" while a chatty producer sent it hundreds of "progress" events reads the heads of
// those (seq, name, time), not their payloads, on every execution and every reload. And what
// each wait receives is what it received before: in the order sent, one event per wait, the
// same on replay (two waits of one name in parallel, a race with a timer, a computed name, a
// child's result, events sent while the run executes, an encrypted store).

import { randomBytes } from "node:crypto";
import pg from "pg";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  encryptedStore,
  type Store,
  sqliteStore,
  type WaitResult,
  workflow,
} from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { advanceUntil, BACKENDS, type Harness, pgUrl, useHarness } from "./helpers/engines.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";
import { tempDbPath, until } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

/** A store that counts the characters of event payloads its journal and event reads return. */
function counting(inner: Store): { store: Store; read: () => number } {
  let chars = 0;
  const sum = (events: ReadonlyArray<{ payload?: string }>) => {
    for (const e of events) chars += e.payload?.length ?? 0;
  };
  const store = around(inner, {
    loadJournal: async (call, ...args) => {
      const j = (await call(...args)) as { events: Array<{ payload: string }> };
      sum(j.events);
      return j;
    },
    pendingEvents: async (call, ...args) => {
      const events = (await call(...args)) as Array<{ payload: string }>;
      sum(events);
      return events;
    },
    eventPayloads: async (call, ...args) => {
      const payloads = (await call(...args)) as Array<{ payload: string }>;
      sum(payloads);
      return payloads;
    },
  });
  return { store, read: () => chars };
}

const NOISE = "n".repeat(1000);

/** The payload a wait received (undefined: it timed out). */
function got<T>(w: WaitResult<T>): T | undefined {
  return w.timedOut ? undefined : w.payload;
}

const approve = workflow({ name: "approve", version: "1" }, async (ctx) => {
  const first = await ctx.waitForEvent<string>("approve");
  await ctx.step("between", () => "x");
  const second = await ctx.waitForEvent<string>("approve");
  return [first, second];
});

async function waiting(h: Harness, id: string) {
  const client = h.engine([], { worker: false });
  await client.start(approve, undefined, { id });
  return client;
}

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a run waiting for one name never reads the payloads of the 300 events of another it was sent", async () => {
    const h = harness();
    const client = await waiting(h, "r");
    for (let i = 0; i < 300; i++) await client.sendEvent("r", "progress", NOISE);
    await client.sendEvent("r", "approve", "yes");
    const { store, read } = counting(h.store());
    const e = h.engine([approve], { store });
    await until(
      async () =>
        (await client.getRun("r"))?.status === "waiting" &&
        (await client.getSteps("r")).length === 3,
      "the first wait and step",
    );
    // Reloads while it waits (a hint per event) read heads too. (Inspection, getSteps, reads
    // the journal whole: the client inspects, not the counted store.)
    for (let i = 0; i < 20; i++) await e.sendEvent("r", "progress", NOISE);
    await e.sendEvent("r", "approve", "again");
    const out = await advanceUntil(h.clock, e.handle("r").result(), 100);
    expect(out).toEqual([
      { timedOut: false, payload: "yes" },
      { timedOut: false, payload: "again" },
    ]);
    // Before: each execution read all 300,000+ characters of "progress" payloads.
    expect(read()).toBeLessThan(NOISE.length);
  });

  it("a loop of waits gets its events in the order sent across a restart, with noise between", async () => {
    const h = harness();
    const loop = workflow({ name: "loop", version: "1" }, async (ctx) => {
      const items: unknown[] = [];
      for (let i = 0; i < 40; i++) {
        items.push(got(await ctx.waitForEvent<number>("item")));
        if (i === 19) await ctx.waitForEvent("half");
      }
      return items;
    });
    const client = h.engine([], { worker: false });
    await client.start(loop, undefined, { id: "l" });
    for (let i = 0; i < 25; i++) {
      await client.sendEvent("l", "item", i);
      await client.sendEvent("l", "noise", NOISE);
    }
    const e1 = h.engine([loop]);
    await until(async () => (await e1.getRun("l"))?.waitingFor?.includes("half") === true, "half");
    await e1.close();
    const e2 = h.engine([loop]);
    await e2.sendEvent("l", "half", null);
    for (let i = 25; i < 40; i++) await e2.sendEvent("l", "item", i);
    const out = await advanceUntil(h.clock, e2.handle("l").result(), 100);
    expect(out).toEqual(Array.from({ length: 40 }, (_, i) => i));
  });

  it("two waits of one name in parallel take the first two events, the same on replay", async () => {
    const h = harness();
    const par = workflow({ name: "par", version: "1" }, async (ctx) => {
      const both = await Promise.all([
        ctx.waitForEvent<string>("x"),
        ctx.waitForEvent<string>("x"),
      ]);
      await ctx.waitForEvent("go");
      return both.map(got);
    });
    const client = h.engine([], { worker: false });
    await client.start(par, undefined, { id: "p" });
    for (const v of ["a", "b", "c"]) await client.sendEvent("p", "x", v);
    const e1 = h.engine([par]);
    await until(async () => (await e1.getRun("p"))?.waitingFor?.includes("go") === true, "go");
    await e1.close();
    const e2 = h.engine([par]);
    await e2.sendEvent("p", "go", null);
    expect(await advanceUntil(h.clock, e2.handle("p").result(), 100)).toEqual(["a", "b"]);
    const left = (await e2.listEvents("p")).filter((ev) => !ev.consumedBy);
    expect(left.map((ev) => ev.payload)).toEqual(["c"]);
  });

  it("a race of a wait with a timer, and a wait of a computed name, resolve the same on replay", async () => {
    const h = harness();
    const race = workflow({ name: "race", version: "1" }, async (ctx) => {
      const won = await Promise.race([
        ctx.waitForEvent<string>("x").then((w) => `event ${got(w)}`),
        ctx.sleep("nap", "1h").then(() => "timer"),
      ]);
      const n = await ctx.step("n", () => 7);
      const named = await ctx.waitForEvent<string>(`item-${n}`);
      await ctx.waitForEvent("go");
      return { won, named: got(named) };
    });
    const client = h.engine([], { worker: false });
    await client.start(race, undefined, { id: "x" });
    await client.sendEvent("x", "noise", NOISE);
    await client.sendEvent("x", "x", "early");
    await client.sendEvent("x", "item-7", "seven");
    const e1 = h.engine([race]);
    await until(async () => (await e1.getRun("x"))?.waitingFor?.includes("go") === true, "go");
    await e1.close();
    const e2 = h.engine([race]);
    await e2.sendEvent("x", "go", null);
    expect(await advanceUntil(h.clock, e2.handle("x").result(), 60_000)).toEqual({
      won: "event early",
      named: "seven",
    });
  });

  it("a payload the store does not answer hands the run back, and the next execution takes the event", async () => {
    const h = harness();
    const client = await waiting(h, "m");
    await client.sendEvent("m", "approve", "yes");
    await client.sendEvent("m", "approve", "again");
    const logged: string[] = [];
    let dropped = 0;
    const store = around(h.store(), {
      eventPayloads: async (call, ...args) => {
        const payloads = (await call(...args)) as unknown[];
        if (dropped++ === 0) return [];
        return payloads;
      },
    });
    const e = h.engine([approve], {
      store,
      log: (m, err) => logged.push(`${m}: ${(err as Error | undefined)?.message}`),
    });
    const out = await advanceUntil(h.clock, e.handle("m").result(), 100);
    expect(out).toEqual([
      { timedOut: false, payload: "yes" },
      { timedOut: false, payload: "again" },
    ]);
    expect(dropped).toBeGreaterThan(1);
    expect(logged.join("\n")).toContain("the store holds no payload for its event #");
  });

  it("a child's result reaches its parent, which was sent noise meanwhile", async () => {
    const h = harness();
    const kid = workflow({ name: "kid", version: "1" }, async (ctx) => {
      const w = await ctx.waitForEvent<number>("n");
      return (got(w) as number) * 2;
    });
    const parent = workflow({ name: "parent", version: "1" }, async (ctx) => {
      const a = await ctx.child("double", kid, undefined);
      return a;
    });
    const e = h.engine([parent, kid]);
    await e.start(parent, undefined, { id: "pa" });
    await until(async () => (await e.getRun("pa/double"))?.status === "waiting", "kid waits");
    for (let i = 0; i < 30; i++) await e.sendEvent("pa", "noise", NOISE);
    await e.sendEvent("pa/double", "n", 21);
    expect(await advanceUntil(h.clock, e.handle("pa").result(), 100)).toBe(42);
  });
});

describe("encryptedStore", () => {
  const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

  it("reads and decrypts only the payloads its waits take", async () => {
    const db = tempDbPath();
    const keys = [key("k1")];
    const { store, read } = counting(sqliteStore(db.path));
    const client = createEngine({
      store: encryptedStore(sqliteStore(db.path), { keys }),
      workflows: [],
      worker: false,
    });
    const e = createEngine({
      store: encryptedStore(store, { keys }),
      workflows: [approve],
      pollIntervalMs: 10,
    });
    try {
      await client.start(approve, undefined, { id: "enc" });
      for (let i = 0; i < 100; i++) await client.sendEvent("enc", "progress", NOISE);
      await client.sendEvent("enc", "approve", "yes");
      await client.sendEvent("enc", "approve", "again");
      const out = await e.handle("enc").result();
      expect(out).toEqual([
        { timedOut: false, payload: "yes" },
        { timedOut: false, payload: "again" },
      ]);
      // Ciphertext of 100 noise payloads would weigh far more than one of them.
      expect(read()).toBeLessThan(NOISE.length);
    } finally {
      await e.close();
      await client.close();
      db.cleanup();
    }
  });

  it("an event under a key the worker lacks stops only the wait that takes it, pausing the run then", async () => {
    const db = tempDbPath();
    const [k1, k2] = [key("k1"), key("k2")];
    const mine = createEngine({
      store: encryptedStore(sqliteStore(db.path), { keys: [k1] }),
      workflows: [],
      worker: false,
    });
    const theirs = createEngine({
      store: encryptedStore(sqliteStore(db.path), { keys: [k2] }),
      workflows: [],
      worker: false,
    });
    const reader = workflow({ name: "reader", version: "1" }, async (ctx) => {
      const first = await ctx.waitForEvent<string>("approve");
      const other = await ctx.waitForEvent<string>("progress");
      return [first, other];
    });
    const e = createEngine({
      store: encryptedStore(sqliteStore(db.path), { keys: [k1] }),
      workflows: [approve, reader],
      pollIntervalMs: 10,
      log: () => {},
    });
    try {
      await mine.start(approve, undefined, { id: "a" });
      await mine.start(reader, undefined, { id: "b" });
      for (const id of ["a", "b"]) {
        await theirs.sendEvent(id, "progress", "sealed");
        await mine.sendEvent(id, "approve", "yes");
      }
      await mine.sendEvent("a", "approve", "again");
      // Before: every execution decrypted every pending event, and paused both runs at once.
      expect(await e.handle("a").result()).toEqual([
        { timedOut: false, payload: "yes" },
        { timedOut: false, payload: "again" },
      ]);
      await until(async () => (await e.getRun("b"))?.status === "paused", "b paused");
      const b = await e.getRun("b");
      expect(b?.reason).toContain('"k2"');
      expect((await e.getSteps("b")).map((s) => [s.key, s.status])).toEqual([
        ["approve", "completed"],
        ["progress", "waiting"],
      ]);
    } finally {
      await e.close();
      await mine.close();
      await theirs.close();
      db.cleanup();
    }
  });
});

describe.skipIf(!pgUrl)("PostgreSQL: heads of more pending events than one JSON text holds", () => {
  it("loadJournal answers them as rows, the same heads pendingEventHeads reads", async () => {
    const reused = reusableSchema(pgUrl!);
    const store = postgresStore(reused.url, { schema: reused.schema });
    const c = new pg.Client({ connectionString: reused.url });
    await c.connect();
    try {
      await store.open({ clock: realClock });
      const { run } = await store.createRun({
        id: "r1",
        workflow: "approve",
        version: "1",
        input: "null",
        budgetLimit: {},
      });
      // 40,000 rows weigh more than 64 MiB as loadJournal sizes a head (2 KiB at most each).
      await c.query(
        `INSERT INTO "${reused.schema}".events (run_id, name, payload, created_at, idempotency_key)
          SELECT 'r1', 'n' || (i % 7), '"p"', i, CASE WHEN i % 3 = 0 THEN 'k' || i END
          FROM generate_series(1, 40000) i`,
      );
      const heads = await store.pendingEventHeads!(run.id);
      expect(heads).toHaveLength(40_000);
      const j = await store.loadJournal(run.id, { eventPayloads: false });
      expect(j.events).toEqual([]);
      expect(j.eventHeads).toEqual(heads);
      expect(heads[2]).toEqual({
        seq: heads[2]!.seq,
        runId: "r1",
        name: "n3",
        createdAt: 3,
        consumedBy: null,
        idempotencyKey: "k3",
      });
    } finally {
      await c.end();
      await store.close();
      await reused.release();
    }
  }, 300_000);
});
