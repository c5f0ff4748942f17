// Findings of an adversarial audit of replay exactness (races, parallel branches, caught
// failures, crashes, hostile values): each test compares what a workflow saw on its first
// execution with what a replay or a resume sees, or shows a run wrongly failed or looping.

import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import {
  type AnyWorkflow,
  encryptedStore,
  FatalError,
  PayloadKeyError,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { createTestEngine } from "../src/testing/index.js";
import { advanceUntil, BACKENDS, type Harness, pgUrl, useHarness } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

function storeFor(backend: string, drops: Array<() => Promise<void>>) {
  if (backend === "sqlite" || !pgUrl) return undefined;
  const { schema, drop } = testSchema(pgUrl);
  drops.push(drop);
  return () => postgresStore(pgUrl as string, { schema });
}

describe.each(BACKENDS)("%s: payloads near the limit", (backend) => {
  const harness = useHarness(backend);

  it("an event payload sendEvent accepted within maxPayloadBytes is delivered by the wait", async () => {
    const h = harness();
    const wf = workflow({ name: "near-limit-event", version: "1" }, async (ctx) => {
      const r = await ctx.waitForEvent<string>("big");
      return r.timedOut ? -1 : r.payload.length;
    });
    const e = h.engine([wf], { maxPayloadBytes: 1_000 });
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "waits");
    const payload = "x".repeat(990);
    await e.sendEvent(run.id, "big", payload);
    await expect(run.result()).resolves.toBe(990);
  });

  it("a child's output within maxPayloadBytes (over the codec's default 2 MiB) reaches its parent", async () => {
    const h = harness();
    const big = 2.5 * 1024 * 1024;
    const kid = workflow({ name: "big-kid", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", 10);
      return "y".repeat(big);
    });
    const wf = workflow({ name: "big-parent", version: "1" }, async (ctx) => {
      const out = await ctx.child("kid", kid, undefined);
      return out.length;
    });
    const e = h.engine([wf, kid], { maxPayloadBytes: 4 * 1024 * 1024 });
    const run = await e.start(wf, undefined);
    await expect(advanceUntil(h.clock, run.result(), 50)).resolves.toBe(big);
  });
});

describe.each(BACKENDS)("%s: a wait's value that cannot be stored", (backend) => {
  const harness = useHarness(backend);

  it("a race between a step and a wait given a payload near the limit takes the same winner on replay", async () => {
    const h = harness();
    const seen: string[][] = [];
    const wf = workflow({ name: "near-limit-race", version: "1" }, async (ctx) => {
      const log: string[] = [];
      seen.push(log);
      const winner = await Promise.race([
        ctx
          .step("slow", async () => {
            await delay(300);
            return "slow";
          })
          .then((v) => {
            log.push(v);
            return v;
          }),
        ctx.waitForEvent<string>("big").then(
          (r) => {
            log.push(r.timedOut ? "timed out" : `big:${r.payload.length}`);
            return "big";
          },
          (err: Error) => {
            log.push(`big failed: ${err.name}`);
            return "big failed";
          },
        ),
      ]);
      log.push(`winner ${winner}`);
      await ctx.waitForEvent("go");
      return log;
    });
    const e = h.engine([wf], { maxPayloadBytes: 1_000 });
    const run = await e.start(wf, undefined);
    await e.sendEvent(run.id, "big", "x".repeat(990));
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "waits for go");
    await e.sendEvent(run.id, "go");
    const out = await run.result();
    expect(seen.length).toBe(2);
    expect(seen[1]).toEqual(seen[0]);
    expect(out).toEqual(seen[0]);
    expect(out).toEqual(["big:990", "winner big", "slow"]);
  });

  it("a wait whose schema makes the payload too big to store fails in its turn, recorded, and the event is consumed", async () => {
    const h = harness();
    const expand = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: (v: unknown) => ({ value: String(v).repeat(100) }),
      },
    };
    const seen: string[][] = [];
    const wf = workflow({ name: "expanding-schema", version: "1" }, async (ctx) => {
      const log: string[] = [];
      seen.push(log);
      try {
        await ctx.waitForEvent("ev", { schema: expand });
        log.push("delivered");
      } catch (err) {
        log.push(`${(err as Error).name}: ${(err as { code?: string }).code}`);
      }
      const again = await ctx.waitForEvent("ev", { timeout: 1_000 });
      log.push(again.timedOut ? "no second event" : "second event");
      await ctx.waitForEvent("go");
      return log;
    });
    const e = h.engine([wf], { maxPayloadBytes: 1_000 });
    const run = await e.start(wf, undefined);
    await e.sendEvent(run.id, "ev", "y".repeat(50));
    await advanceUntil(
      h.clock,
      until(async () => {
        const r = await e.getRun(run.id);
        return r?.status === "waiting" && r.waitingFor?.includes("go");
      }, "waits for go"),
      200,
    );
    await e.sendEvent(run.id, "go");
    const out = await run.result();
    expect(out).toEqual(["SerializationError: SERIALIZATION", "no second event"]);
    // Every execution (the wait's timeout and "go" each start one) saw the same values.
    expect(seen.length).toBeGreaterThan(1);
    for (const log of seen) expect(out.slice(0, log.length)).toEqual(log);
    const steps = await e.getSteps(run.id);
    expect(steps.find((s) => s.key === "ev")?.status).toBe("failed");
  });
});

describe.each(BACKENDS)("%s: a child refused for its input", (backend) => {
  const harness = useHarness(backend);

  it("ctx.child with input its schema refuses, or that cannot be stored, is the call's error, not an endless hand-back", async () => {
    const h = harness();
    let executions = 0;
    const numberInput = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: (v: unknown) =>
          typeof v === "number" ? { value: v } : { issues: [{ message: "expected a number" }] },
      },
    };
    const kid = workflow(
      { name: "strict-kid", version: "1", input: numberInput },
      async (_ctx, n: number) => n * 2,
    );
    const loose = workflow({ name: "loose-kid", version: "1" }, async (_ctx, v: unknown) => v);
    const wf = workflow({ name: "refused-child-parent", version: "1" }, async (ctx) => {
      executions++;
      const out: string[] = [];
      for (const [name, child, input] of [
        ["schema", kid, "not a number"],
        ["unstorable", loose, { fn: () => 1 }],
      ] as const) {
        try {
          out.push(String(await ctx.child(name, child as typeof kid, input as never)));
        } catch (err) {
          out.push((err as Error).name);
        }
      }
      out.push(String(await ctx.child("fine", kid, 21)));
      await ctx.waitForEvent("go");
      return out;
    });
    const e = h.engine([wf, kid, loose]);
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the parent waits");
    await e.sendEvent(run.id, "go");
    expect(await run.result()).toEqual(["InputValidationError", "SerializationError", "42"]);
    // One execution to the wait, one after "go" (and perhaps one the child's end woke).
    expect(executions).toBeLessThanOrEqual(3);
    const steps = await e.getSteps(run.id);
    expect(steps.find((s) => s.key === "schema")?.status).toBe("failed");
    expect(await e.getRun(`${run.id}/schema`)).toBeUndefined();
  });
});

describe.each(BACKENDS)("%s: values drawn with ctx.uuid()", (backend) => {
  const drops: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const d of drops.splice(0)) await d();
  });

  it("ctx.uuid() is not taken for I/O of the workflow's own: the run suspends at its wait at once", async () => {
    // Node's randomUUID() refills a buffer of random bytes (an async resource) every 128
    // calls; drawn in the workflow's scope, that counted as the workflow's own I/O for a
    // second, so the run kept running instead of suspending: under the test engine the
    // clock ran on past the wait's rival sleep before the scripted event was sent.
    const wf = workflow({ name: "many-uuids", version: "1" }, async (ctx) => {
      const ids = new Set<string>();
      for (let i = 0; i < 130; i++) ids.add(ctx.uuid());
      const answer = await Promise.race([
        ctx.waitForEvent<number>("answer").then((r) => (r.timedOut ? "timed out" : r.payload)),
        ctx.sleep("patience", "5s").then(() => "gave up"),
      ]);
      return { ids: ids.size, answer };
    });
    const t = await createTestEngine({ workflows: [wf], store: storeFor(backend, drops) });
    try {
      const run = await t.start(wf, undefined);
      const done = await t.settle(run, { events: [{ name: "answer", payload: 42 }] });
      expect(done.output).toEqual({ ids: 130, answer: 42 });
    } finally {
      await t.close();
    }
  });
});

describe.each(BACKENDS)("%s: odd errors thrown by a step", (backend) => {
  const harness = useHarness(backend);

  /** Runs `wf` to its wait for "go", then replays it; returns what each execution saw. */
  async function firstAndReplay(h: Harness, wf: AnyWorkflow, seen: string[][]) {
    const e = h.engine([wf]);
    const run = await e.start(wf as never, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go");
    const out = await run.result();
    expect(seen.length).toBe(2);
    return out;
  }

  it("an error whose message or stack is not text is handed over the same on replay", async () => {
    const h = harness();
    const seen: string[][] = [];
    const wf = workflow({ name: "odd-error-fields", version: "1" }, async (ctx) => {
      const log: string[] = [];
      seen.push(log);
      try {
        await ctx.step("odd", () => {
          const e = new FatalError("x");
          // Libraries do this: `this.message = options.message` with no message given.
          (e as { message?: unknown }).message = undefined;
          (e as { stack?: unknown }).stack = { frames: 3 };
          throw e;
        });
      } catch (err) {
        log.push(`${(err as Error).name}|${(err as Error).message}|${typeof (err as Error).stack}`);
      }
      await ctx.waitForEvent("go");
      return log;
    });
    const out = await firstAndReplay(h, wf, seen);
    expect(seen[1]).toEqual(seen[0]);
    expect(out).toEqual(["FatalError||string"]);
  });

  it("an error whose message is a BigInt fails its step, not the store's write (no endless hand-back)", async () => {
    const h = harness();
    const seen: string[][] = [];
    const wf = workflow({ name: "bigint-error", version: "1" }, async (ctx) => {
      const log: string[] = [];
      seen.push(log);
      try {
        await ctx.step("odd", () => {
          const e = new FatalError("x");
          (e as { message?: unknown }).message = 10n;
          throw e;
        });
      } catch (err) {
        log.push(`${(err as Error).name}|${(err as Error).message}`);
      }
      await ctx.waitForEvent("go");
      return log;
    });
    const out = await firstAndReplay(h, wf, seen);
    expect(out).toEqual(["FatalError|10"]);
  });
});

describe.each(BACKENDS)("%s: a worker without the key of a recorded value", (backend) => {
  const harness = useHarness(backend);

  it("a replayed value it cannot decrypt pauses the run naming the key; the workflow's catch path never runs", async () => {
    const h = harness();
    const k1 = { id: "k1", key: randomBytes(32).toString("base64") };
    const paths: string[] = [];
    const wf = workflow({ name: "mixed-keys", version: "1" }, async (ctx) => {
      let got: string;
      try {
        await ctx.waitForEvent("go1"); // recorded encrypted with k1
        got = "event";
        paths.push("value");
      } catch (err) {
        paths.push(`catch ${(err as Error).name}`);
        got = await ctx.step("fallback", () => "fallback");
      }
      await ctx.waitForEvent("go2");
      return got;
    });
    const plain = h.engine([wf]);
    const run = await plain.start(wf, undefined);
    await until(async () => (await plain.getRun(run.id))?.status === "waiting", "waits for go1");
    await plain.close();
    const encrypting = h.engine([wf], { store: encryptedStore(h.store(), { keys: [k1] }) });
    await encrypting.sendEvent(run.id, "go1");
    await until(async () => {
      const r = await encrypting.getRun(run.id);
      return r?.status === "waiting" && r.waitingFor?.includes("go2");
    }, "waits for go2");
    await encrypting.close();
    // A worker started without CAIRN_ENCRYPTION_KEYS.
    const keyless = h.engine([wf]);
    await keyless.sendEvent(run.id, "go2");
    const settled = await until(async () => {
      const r = await keyless.getRun(run.id).catch(() => undefined);
      return r && r.status !== "waiting" && r.status !== "running" && r.status !== "pending"
        ? r
        : undefined;
    }, "the keyless worker settles the run");
    expect(paths).toEqual(["value"]);
    expect(settled.status).toBe("paused");
    expect(settled.reason).toMatch(/key "k1"/);
  });
  // A guard of the mend above (it passes on the unmended code too): only a payload this
  // worker cannot read pauses the run, never a call's recorded error of that kind.
  it("a step whose own body threw a PayloadKeyError hands that error over, as a replay does (no pause)", async () => {
    const h = harness();
    const seen: string[][] = [];
    const wf = workflow({ name: "body-key-error", version: "1" }, async (ctx) => {
      const log: string[] = [];
      seen.push(log);
      try {
        await ctx.step(
          "read-other",
          () => {
            throw new PayloadKeyError("another run's payload is encrypted", { keyId: "kx" });
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch (err) {
        log.push((err as Error).name);
      }
      await ctx.waitForEvent("go");
      return log;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go");
    expect(await run.result()).toEqual(["PayloadKeyError"]);
    expect(seen).toEqual([["PayloadKeyError"], ["PayloadKeyError"]]);
  });
});

describe.each(BACKENDS)("%s: ctx.budget.spent after a call that failed for good", (backend) => {
  const harness = useHarness(backend);

  it("reads the same spend on replay as on the first execution, to the last bit", async () => {
    const h = harness();
    const seen: number[][] = [];
    const spends = [0.1, 0.7, 0.2];
    const wf = workflow({ name: "float-spend", version: "1" }, async (ctx) => {
      const log: number[] = [];
      seen.push(log);
      await ctx.step("before", (s) => {
        s.spend({ usd: 0.3 });
        return 1;
      });
      try {
        await ctx.step(
          "flaky",
          (s) => {
            s.spend({ usd: spends[s.attempt - 1] ?? 0 });
            throw new Error(`attempt ${s.attempt} failed`);
          },
          { retry: { maxAttempts: 3, initialDelay: 1, jitter: false } },
        );
      } catch {
        log.push(ctx.budget.spent.usd ?? -1);
      }
      await ctx.waitForEvent("go");
      log.push(ctx.budget.spent.usd ?? -1);
      return log;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await advanceUntil(
      h.clock,
      until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits"),
      10,
    );
    await e.sendEvent(run.id, "go");
    const out = await run.result();
    expect(seen.length).toBe(2);
    // The first execution's reading, and the replay's, are the same number.
    expect(seen[1]?.[0]).toBe(seen[0]?.[0]);
    expect(out).toEqual([seen[0]?.[0], seen[0]?.[0]]);
  });
});

describe.each(BACKENDS)("%s: a call awaited after other work", (backend) => {
  const harness = useHarness(backend);

  it("a step started early that fails before it is awaited is no unhandled rejection (it would end the worker's process, on every replay)", async () => {
    const h = harness();
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    try {
      const seen: string[][] = [];
      const wf = workflow({ name: "prefetch", version: "1" }, async (ctx) => {
        const log: string[] = [];
        seen.push(log);
        const prefetch = ctx.step("prefetch", () => {
          throw new FatalError("prefetch failed");
        });
        await ctx.step("think", async () => {
          await delay(30);
          return 1;
        });
        try {
          log.push(await prefetch);
        } catch (err) {
          log.push(`fallback after ${(err as Error).message}`);
        }
        await ctx.waitForEvent("go");
        return log;
      });
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined);
      await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
      await e.sendEvent(run.id, "go");
      expect(await run.result()).toEqual(["fallback after prefetch failed"]);
      expect(seen).toEqual([
        ["fallback after prefetch failed"],
        ["fallback after prefetch failed"],
      ]);
      await delay(10); // Node reports unhandled rejections after the microtask queue drains
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("a replayed failure handed over before the workflow awaits it is no unhandled rejection either", async () => {
    const h = harness();
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    try {
      const seen: string[][] = [];
      const wf = workflow({ name: "prefetch-replayed", version: "1" }, async (ctx) => {
        const log: string[] = [];
        seen.push(log);
        const prefetch = ctx.step("prefetch", () => {
          throw new FatalError("prefetch failed");
        });
        // The workflow's own wait, outside any call: on replay the recorded failure is
        // handed over at once, and stays unawaited for these 30 ms.
        await delay(30);
        try {
          log.push(await prefetch);
        } catch (err) {
          log.push(`fallback after ${(err as Error).message}`);
        }
        await ctx.waitForEvent("go");
        return log;
      });
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined);
      await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
      await e.sendEvent(run.id, "go");
      expect(await run.result()).toEqual(["fallback after prefetch failed"]);
      expect(seen).toEqual([
        ["fallback after prefetch failed"],
        ["fallback after prefetch failed"],
      ]);
      await delay(10);
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });
});
