// checkReplay in a user's own test: the test engine had no way to hand it a Store of its
// storage (a new user tried `t.engine.store`, which is undefined), and checkReplay given
// no store failed with "Cannot read properties of undefined (reading 'open')". The test
// engine now has `t.store()`, and checkReplay names what it was handed wrong.
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import type { Store } from "../src/store/store.js";
import { checkReplay, createTestEngine } from "../src/testing/index.js";

const v1 = workflow({ name: "replay", version: "1" }, async (ctx, n: number) => {
  const a = await ctx.step("double", async () => n * 2);
  await ctx.sleep("pause", "1h");
  return a + 1;
});
// The same version, changed: a step renamed. Runs recorded by v1 no longer replay.
const v1Changed = workflow({ name: "replay", version: "1" }, async (ctx, n: number) => {
  const a = await ctx.step("twice", async () => n * 2);
  await ctx.sleep("pause", "1h");
  return a + 1;
});

describe("checkReplay against a test engine's runs", () => {
  it("t.store() hands checkReplay the test's storage: ok for the same code, diverged for a renamed step", async () => {
    const t = await createTestEngine({ workflows: [v1] });
    const run = await t.start(v1, 20, { id: "recorded" });
    expect((await t.settle(run)).output).toBe(41);

    const same = await checkReplay({ store: t.store(), workflows: [v1] });
    expect(same.map((r) => [r.runId, r.verdict])).toEqual([["recorded", "ok"]]);

    const changed = await checkReplay({ store: t.store(), workflows: [v1Changed] });
    expect(changed.map((r) => [r.runId, r.verdict])).toEqual([["recorded", "diverged"]]);
    expect(changed[0]?.detail).toMatch(/double/);

    // The engine still serves after the checks closed their own connections.
    const second = await t.start(v1, 1, { id: "after" });
    expect((await t.settle(second)).output).toBe(3);
  });

  it("t.store() after close is an Error, not a new empty database", async () => {
    const t = await createTestEngine({ workflows: [v1] });
    await t.close();
    expect(() => t.store()).toThrow("store(): this test engine is closed; its storage is gone");
  });

  it("a missing or wrong store, workflows or runIds is a TypeError naming the option", async () => {
    const wrong = (o: unknown) => checkReplay(o as Parameters<typeof checkReplay>[0]);
    await expect(wrong({ store: undefined, workflows: [v1] })).rejects.toThrow(
      new TypeError(
        "checkReplay: store must be a Store (sqliteStore(path), postgresStore(url), or a test engine's t.store()), got undefined",
      ),
    );
    const t = await createTestEngine({ workflows: [v1] });
    await expect(wrong({ store: t.store, workflows: [v1] })).rejects.toThrow(
      /store must be a Store .*, got a function \(call it: a Store is what it returns\)$/,
    );
    await expect(wrong({ store: {}, workflows: [v1] })).rejects.toThrow(
      /store must be a Store .*, got an object without open\(\)$/,
    );
    const store: Store = t.store();
    await expect(wrong({ store, workflows: v1 })).rejects.toThrow(
      new TypeError(
        "checkReplay: workflows must be an array of workflow()s (the code to check), got an object",
      ),
    );
    await expect(wrong({ store, workflows: [v1], runIds: "recorded" })).rejects.toThrow(
      new TypeError("checkReplay: runIds must be an array of run ids (strings), got string"),
    );
  });
});
