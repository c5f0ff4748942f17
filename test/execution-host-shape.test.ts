// An execution's ContextHost (engine/execution.ts, ExecutionHost) gives the event readers a
// store offers as fields it always sets (the prototype's reader, or undefined), where each
// one a store does not offer was shadowed by an Object.defineProperty of undefined: a
// runtime call, and a map of its own, for every execution on such a store. Counted here on a
// SQLite store whose pendingEventHeadsOfNames is hidden (a store that reads the heads of one
// name at a time), and the event reads still work through the fields.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** `store` without pendingEventHeadsOfNames (its other verbs as they are). */
function withoutHeadsOfNames(store: Store): Store {
  return new Proxy(store, {
    get(target, prop) {
      if (prop === "pendingEventHeadsOfNames") return undefined;
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

const zero = workflow({ name: "zero", version: "1" }, async () => 0);
const waits = workflow({ name: "waits", version: "1" }, async (ctx) => {
  const ev = await ctx.waitForEvent<number>("go");
  return ev.timedOut ? -1 : ev.payload;
});

describe("an execution's host on a store without pendingEventHeadsOfNames", () => {
  it("defines no property of its own at run time, and reads events by name all the same", async () => {
    const engine = createEngine({
      store: withoutHeadsOfNames(sqliteStore(":memory:")),
      workflows: [zero, waits],
    });
    cleanups.push(() => engine.close());
    for (let i = 0; i < 2; i++) await (await engine.start(zero, undefined)).result();
    const define = Object.defineProperty;
    let defined = 0;
    Object.defineProperty = function (this: unknown, ...a: Parameters<typeof define>) {
      defined++;
      return define.apply(Object, a);
    } as typeof define;
    cleanups.push(() => {
      Object.defineProperty = define;
    });
    const runs = 10;
    try {
      for (let i = 0; i < runs; i++) {
        expect(await (await engine.start(zero, undefined)).result()).toBe(0);
      }
    } finally {
      Object.defineProperty = define;
    }
    expect(defined).toBe(0);
    // The readers the host gives still read: a wait takes its event by name.
    const run = await engine.start(waits, undefined);
    await engine.sendEvent(run.id, "go", 7);
    expect(await run.result()).toBe(7);
  });
});
