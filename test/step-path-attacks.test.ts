// Attacks on this stop's step-path and start-path cuts (issue 13): attempt() settling one
// promise, record()/commit() answering by the Committer's callbacks, the folded start's one
// statement, ctx.now/random/uuid written only when pending. Each case holds on both backends.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type Store, workflow } from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** `inner` with its appendRecords watched: `durable` holds the keys of steps whose write
 *  has been answered ok; `failNext(pred)` fails the next batch holding a write that matches. */
function watched(inner: Store) {
  const durable = new Set<string>();
  let failing: ((w: RunWrite) => boolean) | undefined;
  let failures = 0;
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      if (prop !== "appendRecords") return value.bind(target);
      return async (writes: RunWrite[]) => {
        if (failing && writes.some(failing)) {
          failing = undefined;
          failures++;
          throw new Error("the disk refused the batch");
        }
        const out = await (value as (w: RunWrite[]) => Promise<unknown[]>).call(target, writes);
        writes.forEach((w, i) => {
          const o = out[i] as { ok?: boolean } | undefined;
          if (o === undefined || o.ok !== false) for (const s of w.steps ?? []) durable.add(s.key);
        });
        return out;
      };
    },
  });
  return {
    store,
    durable,
    failNext(pred: (w: RunWrite) => boolean) {
      failing = pred;
    },
    failures: () => failures,
  };
}

function unhandled() {
  const seen: unknown[] = [];
  const onRej = (e: unknown) => seen.push(e);
  process.on("unhandledRejection", onRej);
  process.on("uncaughtException", onRej);
  cleanups.push(() => {
    process.off("unhandledRejection", onRej);
    process.off("uncaughtException", onRej);
  });
  return seen;
}

for (const backend of BACKENDS) {
  describe(`${backend}: step path`, () => {
    it("hands over every kind of body outcome only once its record is durable", async () => {
      const storage = freshStorage(backend, cleanups);
      const w = watched(storage());
      const seenDurable: Array<[string, boolean]> = [];
      const wf = workflow({ name: "kinds", version: "1" }, async (ctx) => {
        const out: unknown[] = [];
        const bodies: Array<[string, () => unknown]> = [
          ["sync", () => 1],
          ["async", async () => 2],
          [
            "thenable",
            () => ({
              // biome-ignore lint/suspicious/noThenProperty: a thenable body result
              then: (r: (v: number) => void) => r(3),
            }),
          ],
          [
            "thenable-throws",
            () => ({
              // biome-ignore lint/suspicious/noThenProperty: a hostile thenable
              then() {
                throw new Error("then threw");
              },
            }),
          ],
          [
            "sync-throw",
            () => {
              throw new Error("sync threw");
            },
          ],
          ["rejected", () => Promise.reject(new Error("rejected"))],
          [
            "getter-throws",
            () => ({
              get x() {
                throw new Error("getter threw");
              },
            }),
          ],
        ];
        for (const [key, body] of bodies) {
          try {
            out.push(await ctx.step(key, body as () => unknown, { retry: { maxAttempts: 1 } }));
          } catch (err) {
            out.push(`error: ${(err as Error).message}`);
          }
          seenDurable.push([key, w.durable.has(key)]);
        }
        return out;
      });
      const engine = createEngine({ store: w.store, workflows: [wf], pollIntervalMs: 10 });
      cleanups.push(() => engine.close());
      const run = await engine.start(wf, undefined);
      const out = (await run.result()) as unknown[];
      expect(out.slice(0, 3)).toEqual([1, 2, 3]);
      expect(out[3]).toMatch(/then threw/);
      expect(out[4]).toMatch(/sync threw/);
      expect(out[5]).toMatch(/rejected/);
      expect(String(out[6])).toMatch(/getter-throws|getter threw/);
      // The getter's value cannot be encoded: that is its outcome, recorded too.
      for (const [key, wasDurable] of seenDurable) expect([key, wasDurable]).toEqual([key, true]);
    });

    it("a store write that fails: no step handed over before its record is durable, no unhandled error, the run still ends right", async () => {
      const seen = unhandled();
      const storage = freshStorage(backend, cleanups);
      const w = watched(storage());
      const handed: Array<[string, boolean]> = [];
      const wf = workflow({ name: "fails", version: "1" }, async (ctx) => {
        const [a, b] = await Promise.all([
          ctx.step("a", async () => "A"),
          ctx.step("b", () => "B"),
        ]);
        handed.push([a, w.durable.has("a")], [b, w.durable.has("b")]);
        const c = await ctx.step("c", () => "C");
        handed.push([c, w.durable.has("c")]);
        return a + b + c;
      });
      w.failNext((x) => (x.steps ?? []).some((s) => s.key === "a"));
      const e1 = createEngine({ store: w.store, workflows: [wf], pollIntervalMs: 10 });
      cleanups.push(() => e1.close());
      const run = await e1.start(wf, undefined);
      await expect(run.result()).resolves.toBe("ABC");
      expect(w.failures()).toBe(1);
      for (const [v, durable] of handed) expect([v, durable]).toEqual([v, true]);
      const steps = await e1.getSteps(run.id);
      expect(steps.map((s) => [s.key, s.result])).toEqual([
        ["a", "A"],
        ["b", "B"],
        ["c", "C"],
      ]);
      expect(seen).toEqual([]);
    });

    it("ctx.now/random/uuid drawn in the tick the function returns are recorded before it completes", async () => {
      const storage = freshStorage(backend, cleanups);
      const engine = createEngine({ store: storage(), workflows: [], pollIntervalMs: 10 });
      cleanups.push(() => engine.close());
      const wf = workflow({ name: "draws", version: "1" }, async (ctx) => {
        const n = ctx.now();
        const r = ctx.random();
        const u = ctx.uuid();
        return { n: typeof n, r, u };
      });
      const engine2 = createEngine({ store: storage(), workflows: [wf], pollIntervalMs: 10 });
      cleanups.push(() => engine2.close());
      const run = await engine2.start(wf, undefined);
      const out = (await run.result()) as { r: number; u: string };
      const steps = await engine.getSteps(run.id);
      expect(steps.map((s) => s.status)).toEqual(["completed", "completed", "completed"]);
      expect(steps[1]!.result).toBe(out.r);
      expect(steps[2]!.result).toBe(out.u);
    });

    it("a step the function did not await, recording as it returns: recorded before the run completes, or not at all", async () => {
      const storage = freshStorage(backend, cleanups);
      const w = watched(storage());
      const order: string[] = [];
      const release = w.store.releaseRun.bind(w.store);
      (w.store as { releaseRun: Store["releaseRun"] }).releaseRun = (r) => {
        order.push(`release:${r.status}`);
        return release(r);
      };
      for (const ticks of [0, 1, 3, 6, 10, 20]) {
        const wf = workflow({ name: `unawaited${ticks}`, version: "1" }, async (ctx) => {
          void ctx.step("bg", () => {
            order.push("body");
            return "now";
          });
          for (let i = 0; i < ticks; i++) await null;
          return "done";
        });
        const engine = createEngine({ store: w.store, workflows: [wf], pollIntervalMs: 10 });
        cleanups.push(() => engine.close());
        order.length = 0;
        w.durable.clear();
        const run = await engine.start(wf, undefined);
        await expect(run.result()).resolves.toBe("done");
        const steps = await engine.getSteps(run.id);
        const bg = steps.find((s) => s.key === "bg");
        if (bg !== undefined && bg.status === "completed") {
          expect(bg.result).toBe("now");
          expect(w.durable.has("bg")).toBe(true);
        }
        // Nothing is written for the run after its release.
        const released = order.findIndex((o) => o.startsWith("release:"));
        if (released >= 0) expect(order.slice(released + 1)).toEqual([]);
        await engine.close();
      }
    });

    it("close() in the tick a step body settles: the run is finished by the next engine, the step's record exact", async () => {
      const storage = freshStorage(backend, cleanups);
      let closing: Promise<void> | undefined;
      let e1!: ReturnType<typeof createEngine>;
      let calls = 0;
      const wf = workflow({ name: "close-race", version: "1" }, async (ctx) => {
        const v = await ctx.step("a", () => {
          calls++;
          return new Promise<number>((resolve) => {
            setTimeout(() => {
              resolve(calls);
              if (calls === 1) closing = e1.close();
            }, 5);
          });
        });
        return v;
      });
      e1 = createEngine({ store: storage(), workflows: [wf], pollIntervalMs: 10, closeGraceMs: 0 });
      cleanups.push(() => e1.close());
      const run = await e1.start(wf, undefined);
      for (let i = 0; i < 200 && closing === undefined; i++)
        await new Promise((r) => setTimeout(r, 10));
      await closing;
      const e2 = createEngine({ store: storage(), workflows: [wf], pollIntervalMs: 10 });
      cleanups.push(() => e2.close());
      const out = await e2.handle(run.id).result();
      const steps = await e2.getSteps(run.id);
      // Whichever won, the run's result is the step's recorded result.
      expect(steps.map((s) => [s.key, s.result])).toEqual([["a", out]]);
    });

    it("close() in the tick of start(): every run started ends right on the next engine, none left leased", async () => {
      const seen = unhandled();
      const storage = freshStorage(backend, cleanups);
      const zero = workflow({ name: "zero-close", version: "1" }, async (_ctx, n: number) => n);
      const one = workflow({ name: "one-close", version: "1" }, async (ctx, n: number) =>
        ctx.step("s", () => n + 1),
      );
      const started: Array<{ id: string; want: number }> = [];
      for (let round = 0; round < 4; round++) {
        const e1 = createEngine({ store: storage(), workflows: [zero, one], pollIntervalMs: 10 });
        cleanups.push(() => e1.close());
        await e1.listRuns({}); // open
        const starts = [e1.start(zero, round), e1.start(one, round)];
        const closing = e1.close();
        const outs = await Promise.allSettled(starts);
        await closing;
        outs.forEach((o, i) => {
          if (o.status === "fulfilled") started.push({ id: o.value.id, want: round + i });
          else expect(String(o.reason)).toMatch(/closed|clos/i);
        });
      }
      const e2 = createEngine({ store: storage(), workflows: [zero, one], pollIntervalMs: 10 });
      cleanups.push(() => e2.close());
      for (const s of started) await expect(e2.handle(s.id).result()).resolves.toBe(s.want);
      const runs = await e2.listRuns({});
      expect(runs.every((r) => r.status === "completed")).toBe(true);
      expect(seen).toEqual([]);
    });

    it("a run returning while an unawaited step's write fails: no unhandled error, the run ends right", async () => {
      const seen = unhandled();
      const storage = freshStorage(backend, cleanups);
      const w = watched(storage());
      const wf = workflow({ name: "bg-fails", version: "1" }, async (ctx) => {
        void ctx.step("bg", () => "bg");
        await null;
        await null;
        return "done";
      });
      w.failNext((x) => (x.steps ?? []).some((s) => s.key === "bg"));
      const engine = createEngine({ store: w.store, workflows: [wf], pollIntervalMs: 10 });
      cleanups.push(() => engine.close());
      const run = await engine.start(wf, undefined);
      await expect(run.result()).resolves.toBe("done");
      const bg = (await engine.getSteps(run.id)).find((s) => s.key === "bg");
      if (bg?.status === "completed") expect(w.durable.has("bg")).toBe(true);
      expect(seen).toEqual([]);
    });

    it("cancel while a body settles as its signal aborts: canceled, the value never handed over, none recorded as the step's", async () => {
      const seen = unhandled();
      const storage = freshStorage(backend, cleanups);
      const handed: unknown[] = [];
      let started!: () => void;
      const began = new Promise<void>((r) => {
        started = r;
      });
      const wf = workflow({ name: "cancel-settle", version: "1" }, async (ctx) => {
        const v = await ctx.step("a", (s) => {
          started();
          return new Promise<string>((resolve, reject) => {
            s.signal.addEventListener("abort", () => {
              resolve("settled in the abort's tick");
              reject(new Error("never"));
            });
          });
        });
        handed.push(v);
        return v;
      });
      const engine = createEngine({
        store: storage(),
        workflows: [wf],
        pollIntervalMs: 10,
        heartbeatMs: 50,
      });
      cleanups.push(() => engine.close());
      const run = await engine.start(wf, undefined);
      await began;
      await engine.cancel(run.id, "stop it");
      await expect(run.result()).rejects.toThrow(/cancel/i);
      expect(handed).toEqual([]);
      const steps = await engine.getSteps(run.id);
      const a = steps.find((x) => x.key === "a");
      expect(a?.status === "completed").toBe(false);
      expect((await engine.getRun(run.id))?.status).toBe("canceled");
      expect(seen).toEqual([]);
    });

    it("two engines start one id at once, a 0-step run: one run, both handles its output", async () => {
      const storage = freshStorage(backend, cleanups);
      const wf = workflow({ name: "zero", version: "1" }, async (_ctx, n: number) => n * 2);
      const e1 = createEngine({ store: storage(), workflows: [wf], pollIntervalMs: 10 });
      const e2 = createEngine({ store: storage(), workflows: [wf], pollIntervalMs: 10 });
      cleanups.push(
        () => e1.close(),
        () => e2.close(),
      );
      for (let i = 0; i < 5; i++) {
        const id = `run_both_${i}`;
        const [h1, h2] = await Promise.all([e1.start(wf, 21, { id }), e2.start(wf, 21, { id })]);
        await expect(h1.result()).resolves.toBe(42);
        await expect(h2.result()).resolves.toBe(42);
      }
      expect((await e1.listRuns({})).length).toBe(5);
    });

    it("a 0-step run whose input cannot be encoded, or that its schema refuses: start fails naming it, no run, the slot free", async () => {
      const storage = freshStorage(backend, cleanups);
      const schema = {
        "~standard": {
          version: 1 as const,
          vendor: "test",
          validate: (v: unknown) =>
            typeof v === "number" ? { value: v } : { issues: [{ message: "a number, please" }] },
        },
      };
      const zero = workflow(
        { name: "zero-in", version: "1" },
        async (_ctx, input: unknown) => input,
      );
      const typed = workflow(
        { name: "typed", version: "1", input: schema },
        async (_ctx, input: number) => input,
      );
      const engine = createEngine({
        store: storage(),
        workflows: [zero, typed],
        pollIntervalMs: 10,
        concurrency: 1,
      });
      cleanups.push(() => engine.close());
      const hostile = {
        get x() {
          throw new Error("getter threw");
        },
      };
      for (let i = 0; i < 3; i++) {
        await expect(engine.start(zero, hostile)).rejects.toThrow(/getter threw|input/i);
        await expect(engine.start(typed, "nope" as unknown as number)).rejects.toThrow(
          /a number, please/,
        );
      }
      expect(await engine.listRuns({})).toEqual([]);
      const ok = await engine.start(typed, 7);
      await expect(ok.result()).resolves.toBe(7);
      const ok2 = await engine.start(zero, { y: 1 });
      await expect(ok2.result()).resolves.toEqual({ y: 1 });
    });
  });
}
