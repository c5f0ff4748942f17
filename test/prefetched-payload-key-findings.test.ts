// A wait reads the payload it takes together with the next pending events of its name
// (Context.eventPayload prefetches up to 16). On an encryptedStore, one of those later events
// under a key this worker lacks must not stop the wait that takes a readable one: the run
// only pauses when a wait takes the unreadable event itself.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createEngine, type EncryptionKey, encryptedStore, workflow } from "../src/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

describe.each(BACKENDS)("prefetched payloads under a missing key (%s)", (backend) => {
  it("a wait takes its readable event though a later event of its name is under another key", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    const make = freshStorage(backend, cleanups);
    const [k1, k2] = [key("k1"), key("k2")];
    const mine = createEngine({
      store: encryptedStore(make(), { keys: [k1] }),
      workflows: [],
      worker: false,
    });
    const theirs = createEngine({
      store: encryptedStore(make(), { keys: [k2] }),
      workflows: [],
      worker: false,
    });
    const once = workflow({ name: "once", version: "1" }, async (ctx) => {
      const w = await ctx.waitForEvent<string>("approve");
      return w.timedOut ? null : w.payload;
    });
    const twice = workflow({ name: "twice", version: "1" }, async (ctx) => {
      const a = await ctx.waitForEvent<string>("approve");
      const b = await ctx.waitForEvent<string>("approve");
      return [a, b].map((w) => (w.timedOut ? null : w.payload));
    });
    const e = createEngine({
      store: encryptedStore(make(), { keys: [k1] }),
      workflows: [once, twice],
      pollIntervalMs: 10,
      log: () => {},
    });
    try {
      await mine.start(once, undefined, { id: "o" });
      await mine.start(twice, undefined, { id: "t" });
      for (const id of ["o", "t"]) {
        await mine.sendEvent(id, "approve", "yes");
        await theirs.sendEvent(id, "approve", "sealed");
      }
      // Before: the first wait's read took "sealed" along and its decryption paused the run.
      const o = await until(async () => {
        const r = await e.getRun("o");
        return r?.status === "completed" || r?.status === "paused" ? r : undefined;
      }, "o settled or paused");
      expect([o.status, o.reason ?? null]).toEqual(["completed", null]);
      expect(await e.handle("o").result()).toBe("yes");
      // The second wait takes the sealed event itself: the run pauses then, the first wait
      // recorded.
      await until(async () => (await e.getRun("t"))?.status === "paused", "t paused");
      expect((await e.getRun("t"))?.reason).toContain('"k2"');
      expect((await e.getSteps("t")).map((s) => [s.key, s.status])).toEqual([
        ["approve", "completed"],
        ["approve#2", "waiting"],
      ]);
    } finally {
      await e.close();
      await mine.close();
      await theirs.close();
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });
});
