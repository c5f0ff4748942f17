import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine } from "../engine/engine.js";
import { sqliteStore } from "../store/sqlite/sqlite-store.js";
import type { RunWrite, StoreHint } from "../store/store.js";
import { workflow } from "../workflow/define.js";
import { crashableStore } from "./crashable-store.js";
import { createVirtualClock } from "./virtual-clock.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function dbPath(): string {
  const dir = mkdtempSync(join(tmpdir(), "cairn-crashable-"));
  dirs.push(dir);
  return join(dir, "cairn.db");
}

const settled = (p: Promise<unknown>) =>
  Promise.race([
    p.then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((r) => setTimeout(() => r(false), 50)),
  ]);

const steps = workflow({ name: "steps", version: "1" }, async (ctx) => {
  const a = await ctx.step("a", () => 1);
  const b = await ctx.step("b", () => 2);
  return a + b;
});

const writesStep = (w: unknown, key: string) =>
  (w as RunWrite[]).some((x) => x.steps?.some((s) => s.key === key));

describe("crashableStore", () => {
  it("after crash(), calls never settle, hints stop, and the inner store is closed", async () => {
    const clock = createVirtualClock();
    const store = crashableStore(sqliteStore(dbPath()));
    await store.open({ clock });
    const hints: StoreHint[] = [];
    store.subscribe((h) => hints.push(h));
    await store.createRun({ id: "r1", workflow: "w", version: "1", input: "0", budgetLimit: {} });
    expect(hints.length).toBeGreaterThan(0);
    const before = hints.length;
    store.crash();
    expect(store.crashed).toBe(true);
    const p = store.createRun({
      id: "r2",
      workflow: "w",
      version: "1",
      input: "0",
      budgetLimit: {},
    });
    expect(await settled(p)).toBe(false);
    expect(hints.length).toBe(before);
    // The inner connection is gone: a store of its own still sees only the first run.
    const other = sqliteStore(store.description);
    await other.open({ clock });
    expect((await other.listRuns()).map((r) => r.id)).toEqual(["r1"]);
    await other.close();
  });

  it("crashBefore: the call never happens; crashAfter: it commits, its result never arrives", async () => {
    for (const when of ["before", "after"] as const) {
      const path = dbPath();
      const clock = createVirtualClock();
      const pred = (call: { verb: string; args: unknown[] }) =>
        call.verb === "appendRecords" && writesStep(call.args[0], "a");
      const dying = crashableStore(sqliteStore(path), {
        ...(when === "before" ? { crashBefore: pred } : { crashAfter: pred }),
      });
      const first = createEngine({ store: dying, workflows: [steps], clock, pollIntervalMs: 5 });
      const run = await first.start(steps, {});
      for (let i = 0; i < 500 && !dying.crashed; i++) await new Promise((r) => setTimeout(r, 2));
      expect(dying.crashed, when).toBe(true);
      void first.close();
      const inspect = sqliteStore(path);
      await inspect.open({ clock });
      const keys = (await inspect.loadJournal(run.id)).steps.map((s) => s.key);
      expect(keys, when).toEqual(when === "before" ? [] : ["a"]);
      // The run still holds the dead worker's lease; a new engine takes it over after it.
      expect((await inspect.getRun(run.id))?.status).toBe("running");
      await clock.advance(30_001);
      const second = createEngine({ store: inspect, workflows: [steps], clock, pollIntervalMs: 5 });
      expect(await second.handle(run.id).result()).toBe(3);
      await second.close();
      await inspect.close();
    }
  });
});
