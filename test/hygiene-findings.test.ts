// Found by an adversarial audit of encryption, retention and tracing, each a regression test
// of a bug it found: an event resent after a key rotation, workspace objects and payloads
// read without their key (paused, naming the key, never failed or hot-looped), one run under
// a retired key breaking listing and retention, gc --dry-run counting what gc keeps, and an
// OpenTelemetry SDK that throws.

import { randomBytes } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  encryptedStore,
  FatalError,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { tempDir, until } from "./helpers/sqlite.js";

const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

describe("encryption and rotation", () => {
  it("an event resent with the same idempotency key and payload after a key rotation is a duplicate, not a conflict", async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, "c.db");
    const clock = createVirtualClock();
    const k1 = key("k1");
    const k2 = key("k2");
    const wf = workflow({ name: "rot-idem", version: "1" }, async (ctx) => {
      const a = await ctx.waitForEvent<string>("a");
      const b = await ctx.waitForEvent<string>("b");
      return `${a.timedOut ? "-" : a.payload}/${b.timedOut ? "-" : b.payload}`;
    });
    try {
      const first = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [k1] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await first.start(wf, undefined, { id: "ri-1" });
      await until(async () => (await first.getRun("ri-1"))?.status === "waiting", "waits");
      await first.sendEvent("ri-1", "a", "hello", { idempotencyKey: "req-1" });
      await first.close();

      // Rotated: k2 encrypts, k1 still reads. The client retries its request (same
      // idempotency key, same payload): the docs promise such a resend is harmless.
      const second = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [k2, k1] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await expect(
        second.sendEvent("ri-1", "a", "hello", { idempotencyKey: "req-1" }),
      ).resolves.toBeDefined();
      // A different payload under the same key is still a conflict.
      await expect(
        second.sendEvent("ri-1", "a", "other", { idempotencyKey: "req-1" }),
      ).rejects.toThrow(/idempotency key/);
      await second.sendEvent("ri-1", "b", "world");
      expect(await second.handle("ri-1").result()).toBe("hello/world");
      await second.close();
    } finally {
      tmp.cleanup();
    }
  });
});

describe("a workspace object under a missing key", () => {
  it("restoring a workspace whose object is encrypted with a key the worker lacks pauses the run naming the key (not fails it)", async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, "c.db");
    const clock = createVirtualClock();
    const k1 = key("k1");
    const k2 = key("k2");
    const wf = workflow({ name: "ws-key", version: "1" }, async (ctx, input: { dir: string }) => {
      const ws = await ctx.workspace("repo", { dir: input.dir });
      await ws.step("write", () => writeFileSync(join(ws.dir, "f.txt"), "x".repeat(500)));
      await ctx.waitForEvent("go");
      return ws.step("read", () => readFileSync(join(ws.dir, "f.txt"), "utf8").length);
    });
    const dir = join(tmp.dir, "w");
    try {
      // Everything under k2, except workspace objects, under k1 (a worker still on k1
      // wrote them during a rolling rotation, or they were deduplicated against older ones).
      const underK2 = encryptedStore(sqliteStore(path), { keys: [k2, k1] });
      const underK1 = encryptedStore(sqliteStore(path), { keys: [k1] });
      const mixed = {
        ...underK2,
        open: async (o: Parameters<typeof underK2.open>[0]) => {
          await underK1.open(o);
          return underK2.open(o);
        },
        close: async () => {
          await underK1.close();
          await underK2.close();
        },
        putWorkspaceObjects: underK1.putWorkspaceObjects,
      };
      const first = createEngine({ store: mixed, workflows: [wf], clock, pollIntervalMs: 10 });
      await first.start(wf, { dir }, { id: "W" });
      await until(async () => (await first.getRun("W"))?.status === "waiting", "W waits");
      await first.close();

      rmSync(dir, { recursive: true, force: true }); // restored on resume
      const second = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [k2] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await second.sendEvent("W", "go", null);
      const status = await until(async () => {
        const s = (await second.getRun("W"))?.status;
        return s === "completed" || s === "paused" || s === "failed" ? s : undefined;
      }, "W settles");
      const w = await second.getRun("W");
      expect(status).toBe("paused");
      expect(w?.reason).toMatch(/key "k1"/);
      await second.close();

      // Given k1 back and resumed, it completes.
      const third = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [k2, k1] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await third.resume("W");
      expect(await third.handle("W").result()).toBe(500);
      await third.close();
    } finally {
      tmp.cleanup();
    }
  });
});

describe("retention and forks", () => {
  it("gc of a finished source run keeps the workspace objects a live fork still restores from", async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, "c.db");
    const clock = createVirtualClock();
    const content = "file content the fork inherits\n".repeat(20);
    const wf = workflow({ name: "fork-gc", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo");
      await ws.step("write", () => writeFileSync(join(ws.dir, "f.txt"), content));
      await ctx.step("mark", () => 1);
      await ctx.waitForEvent("go");
      return ws.step("read", () => readFileSync(join(ws.dir, "f.txt"), "utf8").length);
    });
    const engine = () =>
      createEngine({
        store: sqliteStore(path),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
        workspaceRoot: join(tmp.dir, "ws"),
      });
    try {
      const first = engine();
      await first.start(wf, undefined, { id: "P" });
      await until(async () => (await first.getRun("P"))?.status === "waiting", "P waits");
      await first.sendEvent("P", "go", null);
      expect(await first.handle("P").result()).toBe(content.length);
      await first.fork("P", { fromStep: "mark", id: "F" });
      await until(async () => (await first.getRun("F"))?.status === "waiting", "F waits");
      // Retention: P finished long ago; F is not finished and holds P's checkpoint.
      await clock.advance(60_000);
      const gc = await first.gc({ olderThan: "1s" });
      expect(gc.runs).toBe(1);
      await first.close();

      rmSync(join(tmp.dir, "ws"), { recursive: true, force: true }); // another machine
      const second = engine();
      await second.sendEvent("F", "go", null);
      expect(await second.handle("F").result()).toBe(content.length);
      await second.close();
    } finally {
      tmp.cleanup();
    }
  });
});

describe("gc --dry-run counts what gc deletes", () => {
  it("a finished parent whose child run is still waiting is neither deleted nor counted by a dry run", async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, "c.db");
    const clock = createVirtualClock();
    const child = workflow({ name: "dr-child", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    const parent = workflow({ name: "dr-parent", version: "1" }, async (ctx) => {
      const c = ctx.child("c", child, null);
      c.catch(() => {});
      await ctx.step("s", () => 1);
      throw new FatalError("parent gives up");
    });
    const engine = createEngine({
      store: sqliteStore(path),
      workflows: [parent, child],
      clock,
      pollIntervalMs: 10,
    });
    try {
      await engine.start(parent, undefined, { id: "PA" });
      await until(async () => (await engine.getRun("PA"))?.status === "failed", "PA fails");
      await until(async () => (await engine.getRun("PA/c"))?.status === "waiting", "child waits");
      await clock.advance(60_000);
      const dry = await engine.gc({ olderThan: "1s", dryRun: true });
      const real = await engine.gc({ olderThan: "1s" });
      expect(real.runs).toBe(0);
      expect(await engine.getRun("PA")).toBeDefined();
      expect(dry.runs).toBe(real.runs);
    } finally {
      await engine.close();
      tmp.cleanup();
    }
  });
});

describe("an OpenTelemetry SDK that throws", () => {
  it("a span processor that throws neither loses start() nor strands the run", async () => {
    const { trace } = await import("@opentelemetry/api");
    const { BasicTracerProvider } = await import("@opentelemetry/sdk-trace-base");
    let throwing = true;
    const provider = new BasicTracerProvider({
      spanProcessors: [
        {
          onStart() {
            if (throwing) throw new Error("exporter bug");
          },
          onEnd() {},
          forceFlush: async () => {},
          shutdown: async () => {},
        },
      ],
    });
    trace.setGlobalTracerProvider(provider);
    const tmp = tempDir();
    const wf = workflow({ name: "otel-throws", version: "1" }, async (ctx) =>
      ctx.step("a", () => 7),
    );
    const engine = createEngine({
      store: sqliteStore(join(tmp.dir, "c.db")),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    try {
      const started = await engine.start(wf, undefined, { id: "O" }).then(
        (h) => ({ ok: true as const, h }),
        (err: Error) => ({ ok: false as const, err: err.message }),
      );
      expect(started.ok ? "started" : started.err).toBe("started");
      const done = await Promise.race([
        engine.handle("O").result(),
        new Promise((r) => setTimeout(() => r("stuck"), 3_000)),
      ]);
      expect(done).toBe(7);
    } finally {
      throwing = false;
      await engine.close();
      trace.disable();
      tmp.cleanup();
    }
  });
});

describe("an OpenTelemetry SDK that throws in the worker", () => {
  it("a span processor that starts throwing after start() does not strand or fail the run", async () => {
    const { trace } = await import("@opentelemetry/api");
    const { BasicTracerProvider } = await import("@opentelemetry/sdk-trace-base");
    let throwing = false;
    const provider = new BasicTracerProvider({
      spanProcessors: [
        {
          onStart() {
            if (throwing) throw new Error("exporter bug");
          },
          onEnd() {},
          forceFlush: async () => {},
          shutdown: async () => {},
        },
      ],
    });
    trace.setGlobalTracerProvider(provider);
    const tmp = tempDir();
    const wf = workflow({ name: "otel-throws", version: "1" }, async (ctx) =>
      ctx.step("a", () => 7),
    );
    const engine = createEngine({
      store: sqliteStore(join(tmp.dir, "c.db")),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    try {
      const started = await engine
        .start(wf, undefined, { id: "O" })
        .finally(() => {
          throwing = true;
        })
        .then(
          (h) => ({ ok: true as const, h }),
          (err: Error) => ({ ok: false as const, err: err.message }),
        );
      expect(started.ok ? "started" : started.err).toBe("started");
      const done = await Promise.race([
        engine.handle("O").result(),
        new Promise((r) => setTimeout(() => r("stuck"), 3_000)),
      ]);
      expect(done).toBe(7);
    } finally {
      throwing = false;
      await engine.close();
      trace.disable();
      tmp.cleanup();
    }
  });
});

describe("encrypted data under a worker given no keys", () => {
  it("a worker on an encrypted store without encryptedStore pauses the run naming the key, never fails it or reads ciphertext as data", async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, "c.db");
    const clock = createVirtualClock();
    const k1 = key("k1");
    const wf = workflow({ name: "nokey", version: "1" }, async (ctx, input: { n: number }) => {
      const a = await ctx.step("a", () => input.n + 1);
      await ctx.waitForEvent("go");
      return a;
    });
    try {
      const first = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [k1] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await first.start(wf, { n: 1 }, { id: "N" });
      await until(async () => (await first.getRun("N"))?.status === "waiting", "N waits");
      await first.sendEvent("N", "go", null);
      await first.close();

      // A worker deployed without the keys (CAIRN_ENCRYPTION_KEYS forgotten).
      const plain = createEngine({
        store: sqliteStore(path),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      const status = await until(async () => {
        const s = (await plain.getRun("N"))?.status;
        return s === "completed" || s === "paused" || s === "failed" ? s : undefined;
      }, "N settles");
      const raw = sqliteStore(path);
      await raw.open({ clock });
      const row = await raw.getRun("N");
      await raw.close();
      await plain.close();
      expect({ status, reason: row?.reason }).toMatchObject({ status: "paused" });
      expect(String(row?.reason)).toMatch(/k1/);
    } finally {
      tmp.cleanup();
    }
  });
});

describe("encrypted workspace objects under a worker given no keys", () => {
  it("restoring a workspace object sealed by an encrypted store, through a store with no keys, pauses the run naming the key", async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, "c.db");
    const clock = createVirtualClock();
    const k1 = key("k1");
    const wf = workflow({ name: "ws-nokey", version: "1" }, async (ctx, input: { dir: string }) => {
      const ws = await ctx.workspace("repo", { dir: input.dir });
      await ws.step("write", () => writeFileSync(join(ws.dir, "f.txt"), "y".repeat(300)));
      await ctx.waitForEvent("go");
      return ws.step("read", () => readFileSync(join(ws.dir, "f.txt"), "utf8").length);
    });
    const dir = join(tmp.dir, "w");
    try {
      const plainStore = sqliteStore(path);
      const sealer = encryptedStore(sqliteStore(path), { keys: [k1] });
      const overrides: Record<string, unknown> = {
        open: async (o: Parameters<typeof plainStore.open>[0]) => {
          await sealer.open(o);
          await plainStore.open(o);
          // The sealer marks the store, which then refuses the plain writes this mixed
          // store makes on purpose (store/plain-payloads.ts): unmarked, as a store whose
          // workers turned encryption off.
          await plainStore.unmarkEncrypted?.();
        },
        close: async () => {
          await sealer.close();
          await plainStore.close();
        },
        putWorkspaceObjects: sealer.putWorkspaceObjects,
      };
      const mixed = new Proxy(plainStore, {
        get(target, prop, receiver) {
          if (typeof prop === "string" && prop in overrides) return overrides[prop];
          const v = Reflect.get(target, prop, receiver);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
      const first = createEngine({ store: mixed, workflows: [wf], clock, pollIntervalMs: 10 });
      await first.start(wf, { dir }, { id: "WN" });
      await until(async () => (await first.getRun("WN"))?.status === "waiting", "WN waits");
      await first.close();

      rmSync(dir, { recursive: true, force: true });
      const second = createEngine({
        store: sqliteStore(path),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await second.sendEvent("WN", "go", null);
      const status = await until(async () => {
        const s = (await second.getRun("WN"))?.status;
        return s === "completed" || s === "paused" || s === "failed" ? s : undefined;
      }, "WN settles");
      const w = await second.getRun("WN");
      await second.close();
      expect({ status, reason: w?.reason }).toMatchObject({ status: "paused" });
      expect(String(w?.reason)).toMatch(/key "k1"/);
    } finally {
      tmp.cleanup();
    }
  });
});

describe("one run under a retired key", () => {
  it("neither breaks listing the other runs nor stops gc from deleting it", async () => {
    const tmp = tempDir();
    const path = join(tmp.dir, "c.db");
    const clock = createVirtualClock();
    const k1 = key("k1");
    const k2 = key("k2");
    const wf = workflow({ name: "retired", version: "1" }, async (ctx) => ctx.step("a", () => 1));
    const engineWith = (keys: EncryptionKey[]) =>
      createEngine({
        store: encryptedStore(sqliteStore(path), { keys }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
    try {
      const first = engineWith([k1]);
      expect(await (await first.start(wf, undefined, { id: "old" })).result()).toBe(1);
      await first.close();
      await clock.advance(60_000);
      const second = engineWith([k2]);
      expect(await (await second.start(wf, undefined, { id: "new" })).result()).toBe(1);

      const listed = await second.listRuns();
      expect(listed.map((r) => r.id).sort()).toEqual(["new", "old"]);
      expect(String(listed.find((r) => r.id === "old")?.output)).toBe('[encrypted with key "k1"]');
      expect(listed.find((r) => r.id === "new")?.output).toBe(1);
      // A single read still names the key.
      await expect(second.getRun("old")).rejects.toThrow(/key "k1"/);

      const dry = await second.gc({ olderThan: "30s", dryRun: true });
      expect(dry.runs).toBe(1);
      const gc = await second.gc({ olderThan: "30s" });
      expect(gc.runs).toBe(1);
      expect((await second.listRuns()).map((r) => r.id)).toEqual(["new"]);
      await second.close();
    } finally {
      tmp.cleanup();
    }
  });
});
