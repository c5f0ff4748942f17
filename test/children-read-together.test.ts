// A parent replayed after its N children ended read their N results one name at a time:
// each ctx.child call made again took its `cairn.child:<id>` event, and a store that reads
// events by name (Store.pendingEventHeadsNamed) was asked once per child for the heads, then
// once per child for the payload: 2N round trips where one journal load used to do. Now the
// execution reads the heads of every child its journal holds begun and unfinished with its
// first read (Store.pendingEventHeadsOfNames: one call), and their payloads along with one
// another's (16 a read). Counted: the store calls of the parent's replay, 20 children.

import { describe, expect, it } from "vitest";
import { createEngine, realClock, type Store, workflow } from "../src/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const N = 20;

const child = workflow({ name: "rt-child", version: "1" }, async (ctx, n: number) => {
  await ctx.waitForEvent("go");
  return n * 2;
});
const parent = workflow({ name: "rt-parent", version: "1" }, async (ctx) => {
  const all = await Promise.all(
    Array.from({ length: N }, (_, i) => ctx.child(`kid-${i}`, child, i)),
  );
  return all.reduce((a, b) => a + b, 0);
});

/** `inner`, counting the calls of each verb. */
function counted(inner: Store, calls: Map<string, number>): Store {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        calls.set(String(prop), (calls.get(String(prop)) ?? 0) + 1);
        return value.apply(target, args);
      };
    },
  });
}

describe.each(BACKENDS)("a parent replayed after its children ended (%s)", (backend) => {
  it(`reads the results of ${N} children in one heads read and few payload reads`, async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    try {
      const make = freshStorage(backend, cleanups);
      // The parent starts its children and waits; the children wait for "go".
      const first = createEngine({ store: make(), workflows: [parent, child], pollIntervalMs: 10 });
      const run = await first.start(parent, undefined, { id: "rt-p" });
      let kids: string[] = [];
      await until(async () => {
        const listed = await first.listRuns({ parentId: "rt-p" });
        kids = listed.map((r) => r.id);
        return (
          listed.length === N &&
          listed.every((r) => r.status === "waiting") &&
          (await first.getRun("rt-p"))?.status === "waiting"
        );
      }, "the parent and its children wait");
      await first.close();
      // Only the children run on: they end, each sending the parent its result.
      const kidsOnly = createEngine({ store: make(), workflows: [child], pollIntervalMs: 10 });
      for (const id of kids) await kidsOnly.sendEvent(id, "go", undefined);
      await until(async () => {
        const listed = await kidsOnly.listRuns({ parentId: "rt-p" });
        return listed.every((r) => r.status === "completed");
      }, "the children end");
      await kidsOnly.close();
      // The parent's replay, counted.
      const calls = new Map<string, number>();
      const replay = createEngine({
        store: counted(make(), calls),
        workflows: [parent, child],
        pollIntervalMs: 10,
      });
      cleanups.push(() => replay.close());
      await until(
        async () => (await replay.getRun("rt-p"))?.status === "completed",
        "the parent completes",
      );
      expect((await replay.getRun(run.id))?.output).toBe(N * (N - 1));
      const heads =
        (calls.get("pendingEventHeadsNamed") ?? 0) + (calls.get("pendingEventHeadsOfNames") ?? 0);
      const payloads = calls.get("eventPayloads") ?? 0;
      // Before: 20 heads reads and 20 payload reads.
      expect({ heads, payloads }).toEqual({ heads: 1, payloads: Math.ceil(N / 16) });
      expect(calls.get("loadJournal")).toBe(1);
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });
});

describe.each(BACKENDS)("Store.pendingEventHeadsOfNames (%s)", (backend) => {
  it("reads each page as pendingEventHeadsNamed does, in one call", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    try {
      const store = freshStorage(backend, cleanups)();
      await store.open({ clock: realClock });
      cleanups.push(() => store.close());
      await store.createRun({
        id: "r",
        workflow: "wf",
        version: "1",
        input: "-1",
        budgetLimit: {},
      });
      for (const name of ["a", "x", "b", "a", "x", "a", "b", "x"]) {
        await store.sendEvent({ runId: "r", name, payload: `"${name}"` });
      }
      const seqs = (await store.listEvents("r")).map((e) => e.seq);
      const pages = [
        { name: "a", after: 0, limit: 2 },
        { name: "b", after: seqs[2]!, limit: 10 },
        { name: "none", after: 0, limit: 10 },
        { name: "x", after: seqs[4]!, limit: 1 },
      ];
      const apart = [];
      for (const page of pages) apart.push(...(await store.pendingEventHeadsNamed!("r", page)));
      const together = await store.pendingEventHeadsOfNames!("r", pages);
      expect(together).toEqual(apart);
      expect(together.map((h) => [h.name, h.seq])).toEqual([
        ["a", seqs[0]],
        ["a", seqs[3]],
        ["b", seqs[6]],
        ["x", seqs[7]],
      ]);
      expect(await store.pendingEventHeadsOfNames!("r", pages, { settled: true })).toEqual(apart);
      await expect(
        store.pendingEventHeadsOfNames!("r", [{ name: "a", after: -1, limit: 1 }]),
      ).rejects.toThrow(/pendingEventHeadsNamed/);
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });
});
