// The replay check runs recorded journals against new code without executing anything:
// compatible code passes, a changed call order is reported, and the store is untouched.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import { useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const harness = useHarness("sqlite");

describe("checkReplay", () => {
  it("passes compatible code, reports divergence, executes and writes nothing", async () => {
    const h = harness();
    let bodies = 0;
    let reconciles = 0;
    const v1 = workflow({ name: "deployable", version: "1" }, async (ctx, n: number) => {
      const a = await ctx.step("a", () => n + 1);
      await ctx.effect("notify", {
        perform: () => "sent",
        reconcile: () => undefined,
      });
      if (n === 0) await ctx.waitForEvent("go");
      return ctx.step("b", () => a * 2);
    });
    const e = h.engine([v1]);
    const done = await e.start(v1, 1, { id: "done" });
    await done.result();
    const waiting = await e.start(v1, 0, { id: "waiting" });
    await until(async () => (await e.getRun(waiting.id))?.status === "waiting", "waiting");
    await e.close();
    const store = h.store();
    await store.open({ clock: h.clock });
    const before = JSON.stringify([
      await store.loadJournal("done"),
      await store.loadJournal("waiting"),
    ]);

    // The same logic, refactored: passes.
    const same = workflow({ name: "deployable", version: "1" }, async (ctx, n: number) => {
      const a = await ctx.step("a", () => {
        bodies++;
        return n + 1;
      });
      await ctx.effect("notify", {
        perform: () => {
          bodies++;
          return "sent";
        },
        reconcile: () => {
          reconciles++;
          return undefined;
        },
      });
      if (n === 0) await ctx.waitForEvent("go");
      return ctx.step("b", () => {
        bodies++;
        return a * 2;
      });
    });
    const ok = await checkReplay({ store: h.store(), workflows: [same] });
    expect(ok.map((r) => [r.runId, r.verdict]).sort()).toEqual([
      ["done", "ok"],
      ["waiting", "ok"],
    ]);
    expect(ok.find((r) => r.runId === "done")?.detail).toBe("replayed to completion");

    // A step inserted before "b": both runs diverge at it.
    const changed = workflow({ name: "deployable", version: "1" }, async (ctx, n: number) => {
      await ctx.step("a", () => n + 1);
      await ctx.step("lint", () => {
        bodies++;
      });
      return 0;
    });
    const bad = await checkReplay({ store: h.store(), workflows: [changed] });
    expect(bad.every((r) => r.verdict === "diverged")).toBe(true);
    expect(bad[0]?.detail).toContain('"lint"');
    expect(bad[0]?.detail).toContain('"notify"');
    // A step appended after the last one: the completed run cannot have been produced by
    // this code; the waiting run has not got that far and still matches.
    const appended = workflow({ name: "deployable", version: "1" }, async (ctx, n: number) => {
      const a = await ctx.step("a", () => n + 1);
      await ctx.effect("notify", { perform: () => "sent", reconcile: () => undefined });
      if (n === 0) await ctx.waitForEvent("go");
      const b = await ctx.step("b", () => a * 2);
      await ctx.step("extra", () => {
        bodies++;
      });
      return b;
    });
    const tail = await checkReplay({ store: h.store(), workflows: [appended] });
    const byRun = new Map(tail.map((r) => [r.runId, r]));
    expect(byRun.get("done")?.verdict).toBe("diverged");
    expect(byRun.get("done")?.detail).toContain('"extra"');
    expect(byRun.get("waiting")?.verdict).toBe("ok");
    expect(bodies).toBe(0);
    expect(reconciles).toBe(0);
    expect(
      JSON.stringify([await store.loadJournal("done"), await store.loadJournal("waiting")]),
    ).toBe(before);
    expect((await store.getRun("waiting"))?.status).toBe("waiting");
    await store.close();
  });
});

describe("checkReplay: a recorded key now holding another kind of call", () => {
  it("is divergence, not ok", async () => {
    const h = harness();
    const v1 = workflow({ name: "kinds", version: "1" }, async (ctx) => {
      await ctx.step("a", () => 1);
      return "done";
    });
    const e = h.engine([v1]);
    await (await e.start(v1, undefined, { id: "k1" })).result();
    await e.close();
    const changed = workflow({ name: "kinds", version: "1" }, async (ctx) => {
      await ctx.sleep("a", 10);
      return "done";
    });
    const [res] = await checkReplay({ store: h.store(), workflows: [changed] });
    expect(res?.verdict).toBe("diverged");
    expect(res?.detail).toMatch(/recorded step "a", the code now calls sleep "a"/);
  });
});
