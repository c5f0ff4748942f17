// engine.close() ends, and ends once (found by an audit of what keeps a process alive after
// close): a second close() waits for the first instead of resolving while the store is
// still open; a retention batch under way no longer holds close() up while the worker goes
// on claiming new runs; and a store that hangs (a network partition: pg has no client-side
// limit on a query) no longer hangs close() forever: the queued records and the worker
// row's removal get the grace period (at least 2 s), then close() goes on. A hang shows as
// this file's test timeout.

import { afterEach, describe, expect, it } from "vitest";
import { createAi } from "../src/ai/index.js";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { faultyStore } from "../src/testing/index.js";
import { tempDbPath, until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});
function dbPath(): string {
  const { path, cleanup } = tempDbPath();
  cleanups.push(cleanup);
  return path;
}

const quick = workflow({ name: "quick", version: "1" }, async (ctx, n: number) =>
  ctx.step("s", async () => n),
);

/** `inner`, with `around` wrapped about one of its verbs. */
function wrapVerb(
  inner: Store,
  verb: keyof Store,
  around: (call: () => Promise<unknown>) => Promise<unknown>,
): Store {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      if (prop !== verb) return value.bind(target);
      return (...args: unknown[]) => around(() => value.apply(target, args));
    },
  }) as Store;
}

describe("engine.close()", () => {
  it("a second close() settles only once the first has closed the store", async () => {
    let storeClosed = false;
    const store = wrapVerb(sqliteStore(dbPath()), "close", async (call) => {
      await call();
      storeClosed = true;
    });
    const engine = createEngine({ store, workflows: [quick] });
    expect(await (await engine.start(quick, 1)).result()).toBe(1);
    const seen: boolean[] = [];
    await Promise.all([engine.close(), engine.close().then(() => seen.push(storeClosed))]);
    expect(seen).toEqual([true]);
  });

  it("the worker claims nothing new while a retention batch holds close() up", async () => {
    const path = dbPath();
    let slow = false;
    const store = wrapVerb(sqliteStore(path), "listRuns", async (call) => {
      if (slow) await new Promise((r) => setTimeout(r, 1_500));
      return call();
    });
    const engine = createEngine({
      store,
      workflows: [quick],
      pollIntervalMs: 50,
      retention: { finishedOlderThan: "1h", every: "100ms" },
    });
    await (await engine.start(quick, 1)).result();
    slow = true;
    // A retention batch is now under way, held up in its listRuns.
    await new Promise((r) => setTimeout(r, 250));
    const closing = engine.close();
    const client = createEngine({ store: sqliteStore(path), workflows: [quick], worker: false });
    const started = await client.start(quick, 2);
    await closing;
    expect((await client.getRun(started.id))?.status).toBe("pending");
    await client.close();
  });

  it("a store whose removeWorker hangs does not hang close()", async () => {
    const plan = { stalled: new Set<keyof Store>() };
    const store = faultyStore(sqliteStore(dbPath()), plan);
    const engine = createEngine({ store, workflows: [quick], closeGraceMs: 100, log: () => {} });
    expect(await (await engine.start(quick, 1)).result()).toBe(1);
    plan.stalled.add("removeWorker");
    await engine.close();
  }, 20_000);

  it("a store whose appendRecords hangs does not hang close(); the run is not released", async () => {
    const path = dbPath();
    let appending!: () => void;
    const appendAsked = new Promise<void>((r) => {
      appending = r;
    });
    const store = wrapVerb(sqliteStore(path), "appendRecords", () => {
      appending();
      return new Promise(() => {});
    });
    const engine = createEngine({ store, workflows: [quick], closeGraceMs: 100, log: () => {} });
    const started = await engine.start(quick, 1);
    const outcome = started.result().catch((err: Error) => err.name);
    await appendAsked;
    await engine.close();
    expect(await outcome).toBe("EngineClosedError");
    // The step's record never landed, so the run stays leased to the closed worker, whose
    // row was left in place: another worker takes the run over once the lease passes.
    const look = sqliteStore(path);
    await look.open({ clock: realClock });
    expect((await look.getRun(started.id))?.status).toBe("running");
    expect((await look.loadJournal(started.id)).steps).toEqual([]);
    expect(await look.listWorkers()).toHaveLength(1);
    await look.close();
  }, 20_000);
});

describe("ai.close()", () => {
  it("a second close() settles only once the first has closed the store", async () => {
    let storeClosed = false;
    const store = wrapVerb(sqliteStore(dbPath()), "close", async (call) => {
      await new Promise((r) => setTimeout(r, 50));
      await call();
      storeClosed = true;
    });
    const ai = createAi({ store });
    // Reading a stream opens the kit's store.
    for await (const _ of ai.readStream("run_none", { follow: false })) break;
    const seen: boolean[] = [];
    await Promise.all([ai.close(), ai.close().then(() => seen.push(storeClosed))]);
    expect(seen).toEqual([true]);
  });

  it("cairn/ai close() ends the streams being followed, though the engine keeps the store open", async () => {
    const store = sqliteStore(dbPath());
    const waits = workflow({ name: "waits", version: "1" }, async (ctx) =>
      ctx.waitForEvent("never"),
    );
    const engine = createEngine({ store, workflows: [waits] });
    const run = await engine.start(waits, undefined);
    const ai = createAi({ store });
    const following = (async () => {
      for await (const _ of ai.readStream(run.id, { pollMs: 10 })) {
        // the run streams nothing
      }
    })();
    following.catch(() => {});
    await new Promise((r) => setTimeout(r, 50));
    await ai.close();
    await expect(within(following, 10_000, "the follower after close()")).rejects.toThrow(
      /this kit is closed/,
    );
    // The engine's store is still open: its worker takes the run to its wait (on a loaded
    // machine it may not have got there before the kit closed).
    await until(
      async () => (await engine.getRun(run.id))?.status === "waiting",
      "the run reaching its wait after the kit closed",
    );
    await engine.close();
  });
});
