// A run started by the engine whose own worker serves it takes one of that worker's slots
// (reserveSlot) before its create is asked. On SQLite it is executed as its create waits
// (folded-start.ts). When that create failed before the store asked for the run's release
// (a refusal, a store error), the slot was freed twice: by createExecuted (through
// FoldedStart.durable and Worker.createAnswered) and again by createRun; or, for a function
// that then ended with no call, again by FoldedStart.fold's own answer. Each failed create
// left the worker one slot above its `concurrency`: after two, a worker of concurrency 2
// executed 4 runs at once.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** `inner` whose createReleasedRun fails its first `times` calls, writing nothing. */
function failingCreates(inner: Store, times: number): Store {
  let left = times;
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      if (prop !== "createReleasedRun") return value.bind(target);
      return (...args: unknown[]) => {
        if (left-- > 0) return Promise.reject(new Error("the disk refused the create"));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

describe("a folded start whose create fails frees its worker slot once", () => {
  for (const [what, ends] of [
    ["a run whose function ends with no call (its release would go with the create)", true],
    ["a run whose function is still running when its create fails", false],
  ] as const) {
    it(what, async () => {
      const db = tempDbPath();
      cleanups.push(db.cleanup);
      const store = failingCreates(sqliteStore(db.path), 2);
      let open!: () => void;
      const gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      let executing = 0;
      const refused = workflow({ name: "refused", version: "1" }, async () => {
        if (!ends) await gate;
        return "never stored";
      });
      const held = workflow({ name: "held", version: "1" }, async () => {
        executing++;
        await gate;
        return "done";
      });
      const engine = createEngine({ store, workflows: [refused, held], concurrency: 2 });
      cleanups.push(() => engine.close());
      cleanups.push(() => open());
      for (let i = 0; i < 2; i++) {
        await expect(engine.start(refused, undefined)).rejects.toThrow(/the disk refused/);
      }
      const runs = [];
      for (let i = 0; i < 4; i++) runs.push(await engine.start(held, undefined));
      await until(() => executing >= 2, "two runs executing");
      // The worker is full: the third and fourth runs wait, pending, for a free slot (with
      // the slots freed twice they were created claimed and executed at once).
      const statuses = await Promise.all(
        runs.map(async (r) => (await engine.getRun(r.id))?.status),
      );
      expect(statuses).toEqual(["running", "running", "pending", "pending"]);
      expect(executing).toBe(2);
      open();
      for (const r of runs) await expect(r.result()).resolves.toBe("done");
    });
  }
});
