// Inputs the engine must refuse up front, with an error that names what is wrong and says
// what to do, instead of accepting them and failing later (or never running anything).

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  EngineClosedError,
  type EngineOptions,
  StoreError,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/postgres.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { tempDir, until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const CUT = "👍 great".slice(1);

const paid = workflow({ name: "paid", version: "1", budget: { usd: 0 } }, async (ctx) =>
  ctx.step("work", () => "done"),
);
const waits = workflow({ name: "waits", version: "1" }, async (ctx) => {
  await ctx.waitForEvent("go");
  return "went";
});
const edits = workflow({ name: "edits", version: "1" }, async (ctx, input: { dir: string }) => {
  const ws = await ctx.workspace("repo", { dir: input.dir });
  await ws.step("edit", () => writeFileSync(join(ws.dir, "a.txt"), "two\n"));
  return "edited";
});

describe("sqliteStore paths", () => {
  it('refuses "" (SQLite would use a temporary database, lost on close)', () => {
    for (const path of ["", "  "]) {
      expect(() => sqliteStore(path)).toThrow(StoreError);
      expect(() => sqliteStore(path)).toThrow(/temporary database/);
    }
  });

  it("a store given its options in place of its path says what goes where", () => {
    const asOptions = { path: "runs.db" } as unknown as string;
    expect(() => sqliteStore(asOptions)).toThrow(StoreError);
    expect(() => sqliteStore(asOptions)).toThrow(
      /^sqliteStore\(\): the path must be a string .* not an object with keys path\. Options go second/,
    );
    const urlInOptions = { url: "postgres://x@h/db", schema: "s" } as unknown as string;
    expect(() => postgresStore(urlInOptions)).toThrow(StoreError);
    expect(() => postgresStore(urlInOptions)).toThrow(
      /^postgresStore\(\): the first argument must be a connection URL .* not an object with keys url, schema\. Options go second/,
    );
    expect(() => postgresStore(5 as unknown as string)).toThrow(/not a number \(5\)/);
  });

  it("says a directory is a directory, not a disk I/O error", async () => {
    const tmp = tempDir();
    try {
      const dir = join(tmp.dir, "data");
      mkdirSync(dir);
      const store = sqliteStore(dir);
      const err = await store.open({ clock: realClock }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreError);
      expect((err as Error).message).toMatch(/is a directory/);
      expect((err as Error).message).toContain(join(dir, "cairn.db"));
    } finally {
      tmp.cleanup();
    }
  });
});

describe("numeric engine options", () => {
  const bad: Array<[keyof EngineOptions, unknown[]]> = [
    ["concurrency", [0, -1, Number.NaN, 1.5, Number.POSITIVE_INFINITY, "4"]],
    // 1e19: a lease end PostgreSQL cannot store, so every start() failed there.
    ["leaseMs", [0, -1, Number.NaN, Number.POSITIVE_INFINITY, 1e19]],
    ["heartbeatMs", [0, -5, Number.NaN, 1e19]],
    ["pollIntervalMs", [0, -1, Number.NaN, 1e19]],
    ["closeGraceMs", [-1, Number.NaN, 1e19]],
    ["maxPayloadBytes", [0, -1, Number.NaN, 0.5]],
    ["inProcessRetryMs", [-1, Number.NaN, 1e19]],
  ];
  for (const [name, values] of bad) {
    it(`refuses ${name} = ${values.map(String).join(", ")}, naming the option`, () => {
      for (const v of values) {
        const make = () =>
          createEngine({ store: sqliteStore(":memory:"), worker: false, [name]: v });
        expect(make, `${name} = ${String(v)}`).toThrow(TypeError);
        expect(make).toThrow(new RegExp(`^createEngine\\(\\): ${name} must be`));
      }
    });
  }

  it("accepts zero where zero means something (no grace, no in-process backoff)", async () => {
    const e = createEngine({
      store: sqliteStore(":memory:"),
      worker: false,
      closeGraceMs: 0,
      inProcessRetryMs: 0,
    });
    await e.close();
  });
});

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("resume() refuses NaN, negative and string budget amounts, as start() does", async () => {
    const h = harness();
    const e = h.engine([paid]);
    const run = await e.start(paid, undefined, { id: "over" });
    await until(async () => (await e.getRun("over"))?.status === "paused", "the run pauses");
    for (const usd of [Number.NaN, -1, "5", Number.POSITIVE_INFINITY]) {
      const budget = { usd } as unknown as Record<string, number>;
      await expect(e.resume("over", { budget }), String(usd)).rejects.toThrow(TypeError);
      await expect(e.resume("over", { budget })).rejects.toThrow(
        /^resume\(\): budget "usd" must be/,
      );
      await expect(e.start(paid, undefined, { budget })).rejects.toThrow(
        /^start\(\): budget "usd" must be/,
      );
    }
    await expect(e.resume("over", { budget: { "u\u0000sd": 1 } })).rejects.toThrow(
      /budget name .*NUL/,
    );
    expect((await e.getRun("over"))?.status).toBe("paused");
    await e.resume("over", { budget: { usd: 1 } });
    expect(await within(run.result(), 30_000, "the resumed run")).toBe("done");
  });

  it("fork() refuses the run ids start() refuses, in the same words, and versions no workflow can have", async () => {
    const h = harness();
    const e = h.engine([waits]);
    await e.start(waits, undefined, { id: "src" });
    await until(async () => (await e.getSteps("src")).length > 0, "the wait is recorded");
    await e.sendEvent("src", "go");
    await within(e.handle("src").result(), 30_000, "the source run");
    for (const id of ["", " leading space", "x".repeat(257), "a\u0000b", CUT]) {
      const started = await e.start(waits, undefined, { id }).catch((x: unknown) => x);
      const forked = await e.fork("src", { fromStep: "go", id }).catch((x: unknown) => x);
      expect(started, JSON.stringify(id)).toBeInstanceOf(TypeError);
      expect(forked, JSON.stringify(id)).toBeInstanceOf(TypeError);
      expect((forked as Error).message.replace(/^fork\(\)/, "start()")).toBe(
        (started as Error).message,
      );
    }
    for (const version of ["!", "", " 1", "1\u0000"]) {
      const forked = await e.fork("src", { fromStep: "go", version }).catch((x: unknown) => x);
      expect(forked, JSON.stringify(version)).toBeInstanceOf(TypeError);
      expect((forked as Error).message).toMatch(
        /fork\(\): version .* of the fork of run "src" is invalid/,
      );
    }
    expect((await e.listRuns()).map((r) => r.id)).toEqual(["src"]);
  });

  it("event names and cancel reasons with NUL or a lone surrogate are refused up front", async () => {
    const h = harness();
    const e = h.engine([waits]);
    await e.start(waits, undefined, { id: "w" });
    await expect(e.sendEvent("w", `go\u0000`)).rejects.toThrow(/event name .*NUL/);
    await expect(e.sendEvent("w", `go${CUT}`)).rejects.toThrow(/event name .*lone surrogate/);
    await expect(e.cancel("w", `stop\u0000`)).rejects.toThrow(/reason .*NUL/);
    expect((await e.getRun("w"))?.status).not.toBe("canceled");
  });

  it("a result() pending during close() and calls after close() fail with EngineClosedError", async () => {
    const h = harness();
    const e = h.engine([waits]);
    const run = await e.start(waits, undefined, { id: "held" });
    const pending = run.result();
    pending.catch(() => {});
    await until(async () => (await e.getRun("held"))?.status === "waiting", "the run waits");
    await e.close();
    const err = await within(pending, 30_000, "result()").catch((x: unknown) => x);
    expect(err).toBeInstanceOf(EngineClosedError);
    expect((err as EngineClosedError).code).toBe("ENGINE_CLOSED");
    expect((err as Error).message).toMatch(/"held".*new engine/);
    for (const call of [
      () => e.getRun("held"),
      () => e.start(waits, undefined),
      () => e.sendEvent("held", "go"),
      () => e.handle("held").result(),
    ]) {
      const late = await call().catch((x: unknown) => x);
      expect(late).toBeInstanceOf(EngineClosedError);
      expect((late as EngineClosedError).code).toBe("ENGINE_CLOSED");
      expect((late as Error).message).toMatch(/createEngine\(\)/);
    }
  });

  it("workspace reads after close() fail with EngineClosedError, also for checkpoints read before", async () => {
    const h = harness();
    const tmp = tempDir("cairn-closed-ws-");
    try {
      writeFileSync(join(tmp.dir, "a.txt"), "one\n");
      const e = h.engine([edits]);
      const run = await e.start(edits, { dir: tmp.dir }, { id: "ws" });
      expect(await within(run.result(), 30_000, "the workspace run")).toBe("edited");
      const [repo] = await e.listWorkspaces("ws");
      const [base, edit] = repo!.checkpoints.map((c) => c.checkpoint);
      // Read once while open: the engine remembers these checkpoints as the run's.
      expect((await e.readCheckpoint("ws", edit!)).map((f) => f.path)).toEqual(["a.txt"]);
      expect((await e.diffCheckpoints("ws", base!, edit!)).changes).toHaveLength(1);
      expect((await e.readWorkspaceFile("ws", edit!, "a.txt")).size).toBe(4);
      await e.close();
      for (const [what, call] of [
        ["listWorkspaces", () => e.listWorkspaces("ws")],
        ["readCheckpoint", () => e.readCheckpoint("ws", edit!)],
        ["readWorkspaceFile", () => e.readWorkspaceFile("ws", edit!, "a.txt")],
        ["diffCheckpoints", () => e.diffCheckpoints("ws", base!, edit!)],
        ["readCheckpoint, never read", () => e.readCheckpoint("ws", "0".repeat(64))],
      ] as const) {
        const late = await call().catch((x: unknown) => x);
        expect(late, what).toBeInstanceOf(EngineClosedError);
        expect((late as EngineClosedError).code, what).toBe("ENGINE_CLOSED");
        expect((late as Error).message, what).toMatch(/createEngine\(\)/);
      }
    } finally {
      tmp.cleanup();
    }
  });
});
