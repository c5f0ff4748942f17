// The core contract of ctx.step and the engine on SQLite: record before resolve, decoded
// copies, step keys, recorded now/random/uuid, idempotent start, input validation,
// serialization errors that leave the store unchanged.

import { readFileSync, writeFileSync } from "node:fs";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  InputValidationError,
  RunConflictError,
  SerializationError,
  StoreError,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { faultyStore, writesStep } from "../src/testing/index.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function setup(workflows: AnyWorkflow[], extra = {}) {
  const db = tempDbPath();
  const engine = createEngine({
    store: sqliteStore(db.path),
    workflows,
    pollIntervalMs: 20,
    ...extra,
  });
  cleanups.push(db.cleanup, () => engine.close());
  return { engine, path: db.path };
}

describe("ctx.step", () => {
  it("runs steps once, records them in call order and returns the output", async () => {
    const calls: string[] = [];
    const wf = workflow({ name: "three", version: "1" }, async (ctx, input: { n: number }) => {
      const a = await ctx.step("a", () => {
        calls.push("a");
        return input.n + 1;
      });
      const b = await ctx.step("b", async () => {
        calls.push("b");
        return a * 2;
      });
      return ctx.step("c", () => {
        calls.push("c");
        return { total: b, at: new Date(0), tags: new Set(["x"]), big: 10n };
      });
    });
    const { engine } = setup([wf]);
    const run = await engine.start(wf, { n: 1 });
    const out = await run.result();
    expect(out).toEqual({ total: 4, at: new Date(0), tags: new Set(["x"]), big: 10n });
    expect(calls).toEqual(["a", "b", "c"]);
    const steps = await engine.getSteps(run.id);
    expect(steps.map((s) => [s.key, s.status, s.result])).toEqual([
      ["a", "completed", 2],
      ["b", "completed", 4],
      ["c", "completed", out],
    ]);
    const info = await engine.getRun(run.id);
    expect(info?.status).toBe("completed");
    expect(info?.output).toEqual(out);
  });

  it("hands the first run the decoded copy of what was stored", async () => {
    let seen: unknown;
    const wf = workflow({ name: "copy", version: "1" }, async (ctx) => {
      const original = { list: [1, 2], when: new Date(5), missing: undefined as unknown };
      const got = await ctx.step("s", () => original);
      seen = got;
      return got !== original;
    });
    const { engine } = setup([wf]);
    const run = await engine.start(wf, undefined);
    expect(await run.result()).toBe(true);
    expect(seen).toEqual({ list: [1, 2], when: new Date(5), missing: undefined });
  });

  it("keys repeated names name, name#2, ... and records now/random/uuid under their own kinds", async () => {
    const wf = workflow({ name: "keys", version: "1" }, async (ctx) => {
      for (let i = 0; i < 3; i++) await ctx.step("edit", () => i);
      const t = ctx.now();
      const r = ctx.random();
      const u = ctx.uuid();
      return { t, r, u };
    });
    const { engine } = setup([wf]);
    const run = await engine.start(wf, undefined);
    const out = (await run.result()) as { t: number; r: number; u: string };
    const steps = await engine.getSteps(run.id);
    expect(steps.map((s) => `${s.kind}:${s.key}`)).toEqual([
      "step:edit",
      "step:edit#2",
      "step:edit#3",
      "now:@now",
      "random:@random",
      "uuid:@uuid",
    ]);
    expect(steps[3]?.result).toBe(out.t);
    expect(steps[4]?.result).toBe(out.r);
    expect(steps[5]?.result).toBe(out.u);
  });

  it("start is idempotent on id and refuses an id of another workflow", async () => {
    let runs = 0;
    const a = workflow({ name: "a", version: "1" }, async (ctx) => ctx.step("x", () => ++runs));
    const b = workflow({ name: "b", version: "1" }, async () => 0);
    const { engine } = setup([a, b]);
    const h1 = await engine.start(a, undefined, { id: "same" });
    const h2 = await engine.start(a, undefined, { id: "same" });
    expect(h1.id).toBe(h2.id);
    expect(await h1.result()).toBe(1);
    expect(runs).toBe(1);
    await expect(engine.start(b, undefined, { id: "same" })).rejects.toBeInstanceOf(
      RunConflictError,
    );
    expect((await engine.listRuns()).length).toBe(1);
  });

  it("rejects invalid input before anything is recorded", async () => {
    const wf = workflow(
      { name: "typed", version: "1", input: z.object({ issue: z.number().int() }) },
      async (_ctx, input) => input.issue,
    );
    const { engine } = setup([wf]);
    const err = await engine
      .start(wf, { issue: "42" } as never, { id: "bad-input" })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InputValidationError);
    expect((err as Error).message).toContain("issue");
    expect((err as Error).message).toContain("bad-input");
    expect(await engine.getRun("bad-input")).toBeUndefined();
    expect(await engine.listRuns()).toEqual([]);
  });

  it("fails on the first run when a step returns something unstorable, naming the step", async () => {
    let after = 0;
    const wf = workflow({ name: "unstorable", version: "1" }, async (ctx) => {
      await ctx.step("ok", () => 1);
      await ctx.step("bad", () => ({ fn: () => 1 }));
      after++;
      return "never";
    });
    const { engine } = setup([wf]);
    const run = await engine.start(wf, undefined);
    const err = await run.result().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SerializationError);
    expect((err as Error).message).toContain('"bad"');
    expect((err as Error).message).toContain("fn");
    expect(after).toBe(0);
    const steps = await engine.getSteps(run.id);
    expect(steps.find((s) => s.key === "ok")?.status).toBe("completed");
    const bad = steps.find((s) => s.key === "bad");
    expect(bad?.status).toBe("failed");
    expect(bad?.result).toBeUndefined();
    expect((await engine.getRun(run.id))?.error?.code).toBe("SERIALIZATION");
  });

  it("fails a result over the payload limit with its size, and an oversized input at start", async () => {
    const wf = workflow({ name: "big", version: "1" }, async (ctx) =>
      ctx.step("huge", () => "x".repeat(5000)),
    );
    const { engine } = setup([wf], { maxPayloadBytes: 1000 });
    const run = await engine.start(wf, undefined);
    const err = await run.result().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SerializationError);
    expect((err as Error).message).toMatch(/"huge".*over the payload limit of 1000 bytes/);
    await expect(engine.start(wf, "y".repeat(5000), { id: "big-in" })).rejects.toBeInstanceOf(
      SerializationError,
    );
    expect(await engine.getRun("big-in")).toBeUndefined();
  });

  it("lets a workflow catch a step's final error, and replays that error instead of re-running", async () => {
    let attempts = 0;
    const wf = workflow({ name: "catch", version: "1" }, async (ctx) => {
      try {
        await ctx.step(
          "flaky",
          () => {
            attempts++;
            throw new Error("nope");
          },
          { retry: { maxAttempts: 2, initialDelay: 1 } },
        );
      } catch (e) {
        return `caught ${(e as Error).message}`;
      }
      return "no";
    });
    const { engine } = setup([wf]);
    const run = await engine.start(wf, undefined);
    expect(await run.result()).toBe("caught nope");
    expect(attempts).toBe(2);
    const [flaky] = await engine.getSteps(run.id);
    expect(flaky?.status).toBe("failed");
    expect(flaky?.attempts.map((a) => a.error?.message)).toEqual(["nope", "nope"]);
  });
});

describe("engine", () => {
  it("runs 500 concurrent runs of 10 steps, each step recorded once", async () => {
    const counts = new Map<string, number>();
    const wf = workflow({ name: "many", version: "1" }, async (ctx, input: { i: number }) => {
      let sum = 0;
      for (let s = 0; s < 10; s++) {
        sum += await ctx.step(`s${s}`, () => {
          const k = `${ctx.runId}/${s}`;
          counts.set(k, (counts.get(k) ?? 0) + 1);
          return input.i + s;
        });
      }
      return sum;
    });
    const { engine } = setup([wf], { concurrency: 500 });
    const handles: Engine extends never ? never : Awaited<ReturnType<Engine["start"]>>[] = [];
    for (let i = 0; i < 500; i++) handles.push(await engine.start(wf, { i }));
    const outs = await Promise.all(handles.map((h) => h.result()));
    expect(outs).toEqual(handles.map((_, i) => 10 * i + 45));
    expect(counts.size).toBe(5000);
    expect([...counts.values()].every((c) => c === 1)).toBe(true);
    for (const h of handles.slice(0, 20)) {
      const steps = await engine.getSteps(h.id);
      expect(steps.map((s) => s.key)).toEqual(Array.from({ length: 10 }, (_, s) => `s${s}`));
    }
    const m = engine.metrics();
    // Group commit: 5,000 step records took far fewer transactions.
    expect(m.commitBatches).toBeLessThan(m.commitWrites);
  });
});

describe("bad stores and shutdown", () => {
  it("refuses a corrupted database file with an error naming it, leaving its bytes untouched", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const garbage = Buffer.from("this is not a sqlite database, it is a text file\n".repeat(200));
    writeFileSync(db.path, garbage);
    const engine = createEngine({ store: sqliteStore(db.path), workflows: [] });
    const wf = workflow({ name: "x", version: "1" }, async () => 1);
    const err = await engine.start(wf, undefined).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toContain(db.path);
    expect(readFileSync(db.path).equals(garbage)).toBe(true);
    await engine.close();
  });

  it("refuses a database written by a newer cairn, leaving it untouched", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const wf = workflow({ name: "x", version: "1" }, async () => 1);
    const e1 = createEngine({ store: sqliteStore(db.path), workflows: [wf] });
    await (await e1.start(wf, undefined, { id: "kept" })).result();
    await e1.close();
    const raw = new Database(db.path);
    raw.prepare("UPDATE schema_version SET version = version + 100").run();
    raw.close();
    const before = readFileSync(db.path);
    const e2 = createEngine({ store: sqliteStore(db.path), workflows: [wf] });
    const err = await e2.getRun("kept").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toContain(db.path);
    expect((err as Error).message).toMatch(/newer/i);
    expect(readFileSync(db.path).equals(before)).toBe(true);
    await e2.close();
  });

  it("close() stops claiming, waits its grace period, and releases leases for another worker", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    let calls = 0;
    const wf = workflow({ name: "long", version: "1" }, async (ctx) =>
      ctx.step("long", async (s) => {
        calls++;
        if (calls === 1) await new Promise((r) => setTimeout(r, 60_000));
        return s.attempt;
      }),
    );
    const a = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf],
      leaseMs: 1_000,
      closeGraceMs: 50,
      pollIntervalMs: 10,
    });
    const run = await a.start(wf, undefined);
    await until(() => calls === 1, "step running");
    await a.close();
    // The attempt outlasted the grace and still runs in this process: the run stays leased
    // until its lease ends; then another worker takes over, charging that attempt as lost.
    const b = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf],
      leaseMs: 60_000,
      pollIntervalMs: 10,
    });
    cleanups.push(() => b.close());
    expect(await b.handle(run.id).result()).toBe(2);
  });
});

describe("store failures", () => {
  it("a failed journal write interrupts the execution but never fails the run", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    let failed = 0;
    const store = faultyStore(sqliteStore(db.path), {
      beforeAppend: (w) => {
        if (failed === 0 && writesStep(w, "b")) {
          failed++;
          throw new Error("connection reset (injected)");
        }
      },
    });
    const calls: string[] = [];
    const wf = workflow({ name: "flaky-store", version: "1" }, async (ctx) => {
      await ctx.step("a", () => calls.push("a"));
      await ctx.step("b", () => calls.push("b"));
      await ctx.step("c", () => calls.push("c"));
      return "done";
    });
    const logs: string[] = [];
    const engine = createEngine({
      store,
      workflows: [wf],
      pollIntervalMs: 10,
      log: (m) => logs.push(m),
    });
    cleanups.push(() => engine.close());
    const run = await engine.start(wf, undefined);
    expect(await run.result()).toBe("done");
    expect(failed).toBe(1);
    // b's body ran again (its record was never written); a was replayed, not re-run.
    expect(calls).toEqual(["a", "b", "b", "c"]);
    expect(logs.some((m) => m.includes("interrupted by a store error"))).toBe(true);
  });
});
