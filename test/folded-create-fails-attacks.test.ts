// A run executed as its create waits (SQLite's folded start): its first step waits in
// runAttempts (executeWaits, this stop) for the create to be durable. Attack: the create
// fails after the step was made, as a ctx.now was drawn, and while the function returns in
// the same tick: no step body runs, nothing of the run is written, start() fails with the
// store's error, and the worker's slot is free for the next run.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** `inner` whose createReleasedRun fails its first `times` calls, a turn later, writing nothing. */
function failingCreates(inner: Store, times: number): Store {
  let left = times;
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      if (prop !== "createReleasedRun") return value.bind(target);
      return (...args: unknown[]) => {
        if (left-- > 0) {
          return new Promise((_, reject) =>
            setImmediate(() => reject(new Error("the disk refused the create"))),
          );
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

describe("sqlite: a folded create that fails", () => {
  for (const shape of ["step", "draw", "draw-and-return", "unawaited-step"] as const) {
    it(`runs no body and writes nothing (${shape})`, async () => {
      const db = tempDbPath();
      cleanups.push(db.cleanup);
      let bodies = 0;
      const wf = workflow({ name: `refused-${shape}`, version: "1" }, async (ctx) => {
        if (shape === "step") return ctx.step("a", () => ++bodies);
        if (shape === "unawaited-step") {
          void ctx.step("a", () => ++bodies);
          return 0;
        }
        const t = ctx.now();
        if (shape === "draw") await ctx.step("a", () => ++bodies);
        return t;
      });
      const engine = createEngine({
        store: failingCreates(sqliteStore(db.path), 3),
        workflows: [wf],
        concurrency: 1,
      });
      cleanups.push(() => engine.close());
      for (let i = 0; i < 3; i++) {
        await expect(engine.start(wf, undefined)).rejects.toThrow(/the disk refused/);
      }
      expect(bodies).toBe(0);
      expect(await engine.listRuns({})).toEqual([]);
      // The one slot is free: the next run executes and ends.
      const run = await engine.start(wf, undefined);
      await expect(run.result()).resolves.toBeDefined();
    });
  }
});
