// cairn/ai rate limits: a provider's 429 becomes a RATE_LIMIT attempt retried no sooner
// than its Retry-After, and blocks the shared limiter so that other runs wait too; the
// limiter's window (requests per minute) holds across every run of two workers; a long
// limiter wait releases the run instead of holding a worker slot. All on virtual time.

import { APICallError, generateText } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { createAi } from "../src/ai/index.js";
import { createEngine, type Store, workflow } from "../src/index.js";
import type { VirtualClock } from "../src/testing/index.js";
import {
  type AgentOutput,
  agentModel,
  agentWorkflow,
  PRICES,
  textAnswer,
} from "./fixtures/ai-agent.js";
import { kitFor, memoryDeps } from "./helpers/ai.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** The virtual clock moves in jumps while a worker waits for real I/O; a lease it let
 *  expire mid-call would hand the run to another execution (a zombie call, as after a real
 *  stall, which the kill tests cover). These tests are about waits, so leases outlast them. */
const LONG_LEASE = { leaseMs: 600_000 };

/** Counts store calls in flight across every store it wraps. */
function storeCallsInFlight() {
  let n = 0;
  const wrap = (store: Store): Store =>
    new Proxy(store, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver);
        if (typeof v !== "function") return v;
        if (prop === "subscribe") return v.bind(target);
        return (...args: unknown[]) => {
          n++;
          return Promise.resolve(v.apply(target, args)).finally(() => {
            n--;
          });
        };
      },
    });
  return { wrap, busy: () => n > 0 };
}

/** Advances the virtual clock in steps while no store call is in flight, until `done`. */
async function advanceWhileQuiet<T>(
  clock: VirtualClock,
  done: Promise<T>,
  busy: () => boolean,
  stepMs: number,
  maxSteps = 20_000,
): Promise<T> {
  let settled = false;
  const p = done.finally(() => {
    settled = true;
  });
  p.catch(() => {});
  for (let i = 0; i < maxSteps && !settled; i++) {
    if (!busy()) await clock.advance(stepMs);
    await new Promise((r) => setTimeout(r, 2));
  }
  return p;
}

function tooManyRequests(headers: Record<string, string>): APICallError {
  return new APICallError({
    message: "Rate limit reached for requests",
    url: "https://api.example.com/v1/chat",
    requestBodyValues: {},
    statusCode: 429,
    responseHeaders: headers,
  });
}

/** A model that answers "ok", after `fail(n)` decides whether call n gets a 429. */
function countingModel(clock: { now(): number }, fail: (n: number) => boolean) {
  const calls: number[] = [];
  const model = new MockLanguageModelV4({
    doGenerate: async () => {
      calls.push(clock.now());
      if (fail(calls.length)) throw tooManyRequests({ "retry-after": "30" });
      return textAnswer("ok");
    },
  });
  return { model, calls };
}

describe.each(BACKENDS)("rate limits (%s)", (backend) => {
  const harness = useHarness(backend);

  it("a 429 with Retry-After: 30 is a RATE_LIMIT attempt, retried no sooner than 30 s later", async () => {
    const h = harness();
    const { model, calls } = countingModel(h.clock, (n) => n === 1);
    const ai = kitFor(h);
    const wf = workflow({ name: "one-call", version: "1" }, async (ctx) => {
      const r = await generateText({ model: ai.model(ctx, model), prompt: "hi" });
      return r.text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    const run = await engine.start(wf, null);
    // 30 s is past the in-process backoff limit (5 s): the run is released meanwhile.
    const released = await until(async () => {
      const info = await run.info();
      return info?.status === "waiting" ? info : undefined;
    }, "the run released for its backoff");
    expect(released.wakeAt?.getTime()).toBeGreaterThanOrEqual((calls[0] ?? 0) + 30_000);
    expect(await advanceUntil(h.clock, run.result(), 1_000)).toBe("ok");
    expect(calls.length).toBe(2);
    expect((calls[1] ?? 0) - (calls[0] ?? 0)).toBeGreaterThanOrEqual(30_000);
    const [step] = await engine.getSteps(run.id);
    expect(step?.status).toBe("completed");
    expect(step?.attempts.length).toBe(2);
    expect(step?.attempts[0]?.error?.code).toBe("RATE_LIMIT");
    expect(step?.attempts[0]?.error?.name).toBe("RateLimitError");
    expect(step?.attempts[0]?.error?.message).toMatch(
      /rate-limited the call \(HTTP 429\); it asked to wait 30 s/,
    );
    expect(step?.attempts[1]?.error).toBeUndefined();
  });

  it("a 429 seen by one run makes the others wait for its Retry-After, releasing them meanwhile", async () => {
    const h = harness();
    const { model, calls } = countingModel(h.clock, (n) => n === 1);
    const ai = kitFor(h);
    const wf = workflow({ name: "one-call", version: "1" }, async (ctx, _n: number) => {
      const r = await generateText({ model: ai.model(ctx, model), prompt: "hi" });
      return r.text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    const first = await engine.start(wf, 1);
    await until(() => calls.length === 1, "the first run's 429");
    const t429 = calls[0]!;
    await until(async () => (await first.info())?.status === "waiting", "the first run released");
    const second = await engine.start(wf, 2);
    const throttled = await until(async () => {
      const steps = await engine.getSteps(second.id);
      return steps.find((s) => s.key === "model:mock-model-id:throttled");
    }, "the second run throttled by the shared limiter");
    expect(throttled.kind).toBe("sleep");
    expect(calls.length).toBe(1); // the second run did not reach the provider
    const results = Promise.all([first.result(), second.result()]);
    expect(await advanceUntil(h.clock, results, 1_000)).toEqual(["ok", "ok"]);
    expect(calls.length).toBe(3);
    for (const t of calls.slice(1)) expect(t - t429).toBeGreaterThanOrEqual(30_000);
    // The throttled call recorded no attempt: waiting for the limiter is not a failure.
    const steps = await engine.getSteps(second.id);
    expect(steps.map((s) => s.key)).toEqual([
      "model:mock-model-id",
      "model:mock-model-id:throttled",
      "model:mock-model-id#2",
    ]);
    expect(steps[0]?.result).toMatchObject({ throttledUntil: t429 + 30_000 });
    expect(steps.every((s) => s.attempts.every((a) => a.error === undefined))).toBe(true);
  });

  it("two workers and 20 runs share one limiter: the provider never sees more than 10 requests a minute", async () => {
    const h = harness();
    const deps = memoryDeps();
    const calls: number[] = [];
    const model = agentModel({
      deps,
      before: () => {
        calls.push(h.clock.now());
      },
    });
    const limits = { "mock-provider:*": { requestsPerMinute: 10 } };
    // Each worker has its own kit and store connection, as two processes would. The clock
    // moves only while no store call is in flight, so the time a grant is taken at is the
    // time its provider call is made at (nothing but microtasks lies between them).
    const quiet = storeCallsInFlight();
    const kit = () =>
      createAi({ store: quiet.wrap(h.store()), clock: h.clock, prices: PRICES, limits });
    const kits = [kit(), kit()];
    const workers = kits.map((ai) =>
      createEngine({
        store: quiet.wrap(h.store()),
        workflows: [agentWorkflow(ai, model, deps)],
        clock: h.clock,
        pollIntervalMs: 10,
        concurrency: 8,
        ...LONG_LEASE,
      }),
    );
    try {
      const wf = agentWorkflow(kits[0]!, model, deps);
      const runs = await Promise.all(
        Array.from({ length: 20 }, (_, i) => workers[i % 2]!.start(wf, { topic: `t${i}` })),
      );
      const all = Promise.all(runs.map((r) => r.result()));
      const outs = (await advanceWhileQuiet(h.clock, all, quiet.busy, 1_000)) as AgentOutput[];
      outs.forEach((o, i) => {
        expect(o.text).toMatch(new RegExp(`^Done with t${i}: `));
      });
      // 20 runs x 3 turns, each call made once.
      expect(calls.length).toBe(60);
      expect(deps.count("model")).toBe(60);
      calls.sort((a, b) => a - b);
      // In any minute at most 10 calls: the 11th call after any call is 60 s or more later.
      for (let i = 0; i + 10 < calls.length; i++) {
        expect(calls[i + 10]! - calls[i]!, `calls ${i} and ${i + 10}`).toBeGreaterThanOrEqual(
          60_000,
        );
      }
      expect(calls.at(-1)! - calls[0]!).toBeGreaterThanOrEqual(5 * 60_000);
      // Both workers executed runs; some waits were long enough to release runs.
      for (const w of workers) expect(w.metrics().claimed).toBeGreaterThan(0);
      const steps = await workers[0]!.getSteps(runs[19]!.id);
      expect(steps.some((st) => st.key.endsWith(":throttled"))).toBe(true);
    } finally {
      for (const w of workers) await w.close();
      for (const k of kits) await k.close();
    }
  });

  it("tokens per minute count what the calls really used, not just their estimates", async () => {
    const h = harness();
    const { model, calls } = countingModel(h.clock, () => false);
    const quiet = storeCallsInFlight();
    // Each call is estimated at about 200 tokens (its output allowance) but uses 1,200.
    const ai = kitFor(h, { limits: { "*": { tokensPerMinute: 2_500 } } });
    const wf = workflow({ name: "three-calls", version: "1" }, async (ctx) => {
      for (let i = 0; i < 3; i++) {
        await generateText({ model: ai.model(ctx, model), prompt: "hi", maxOutputTokens: 200 });
      }
      return "done";
    });
    const engine = h.engine([wf], LONG_LEASE);
    const run = await engine.start(wf, null);
    // The clock stands still: two calls fit (2,400 tokens used), the third would pass on
    // estimates alone but has to wait for the first to leave the window.
    const waiting = await until(async () => {
      const info = await run.info();
      return info?.status === "waiting" ? info : undefined;
    }, "the third call throttled");
    expect(calls.length).toBe(2);
    expect(waiting.wakeAt?.getTime()).toBe(calls[0]! + 60_000);
    expect(await advanceWhileQuiet(h.clock, run.result(), quiet.busy, 1_000)).toBe("done");
    expect(calls.length).toBe(3);
    expect(calls[2]! - calls[0]!).toBeGreaterThanOrEqual(60_000);
    expect((await engine.getSteps(run.id)).map((st) => st.key)).toEqual([
      "model:mock-model-id",
      "model:mock-model-id#2",
      "model:mock-model-id#3", // throttled: no call made
      "model:mock-model-id:throttled",
      "model:mock-model-id#4",
    ]);
  });

  it("a short limiter wait is waited out in process; a long one releases the run", async () => {
    const h = harness();
    const { model, calls } = countingModel(h.clock, () => false);
    const quiet = storeCallsInFlight();
    const ai = kitFor(h, { limits: { "*": { requestsPerMinute: 1 } }, maxInProcessWaitMs: 5_000 });
    const wf = workflow({ name: "one-call", version: "1" }, async (ctx, _n: number) => {
      const r = await generateText({ model: ai.model(ctx, model), prompt: "hi" });
      return r.text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    expect(await (await engine.start(wf, 1)).result()).toBe("ok");
    const t0 = calls[0]!;
    // 56 s later the window has room in 4 s. Two runs ask: one waits that out in its step
    // (no record of it); the other then faces a whole minute, and is released meanwhile.
    await h.clock.advance(56_000);
    const runs = [await engine.start(wf, 2), await engine.start(wf, 3)];
    await advanceWhileQuiet(
      h.clock,
      until(() => calls.length === 2, "the second call"),
      quiet.busy,
      500,
    );
    expect(calls[1]!).toBeGreaterThanOrEqual(t0 + 60_000);
    // Both runs were told "room at t0 + 60 s" and slept that out in process; the other one
    // then asks again and is released. Its sleep may end a little later than the first's
    // (it began once its answer arrived, and the clock may have moved meanwhile), so the
    // clock keeps moving, in steps far shorter than the minute its durable sleep will take.
    const waiting = await advanceWhileQuiet(
      h.clock,
      until(async () => {
        for (const r of runs) {
          const info = await r.info();
          if (info?.status === "waiting") return info;
        }
        return undefined;
      }, "the throttled run released"),
      quiet.busy,
      100,
    );
    expect(waiting.wakeAt?.getTime()).toBeGreaterThanOrEqual(t0 + 120_000);
    // The released run holds no execution. The other run may still be finishing (its
    // release commits after this run's status reads "waiting"), so this waits for both; the
    // clock stands still meanwhile, so a run sleeping out its minute in process never ends.
    await until(() => engine.metrics().activeExecutions === 0, "no execution held while released");
    const outs = await advanceWhileQuiet(
      h.clock,
      Promise.all(runs.map((r) => r.result())),
      quiet.busy,
      1_000,
    );
    expect(outs).toEqual(["ok", "ok"]);
    expect(calls[2]!).toBeGreaterThanOrEqual(waiting.wakeAt!.getTime());
    const keys = await Promise.all(
      runs.map(async (r) => (await engine.getSteps(r.id)).map((st) => st.key)),
    );
    const released = runs.findIndex((r) => r.id === waiting.id);
    expect(keys[1 - released]).toEqual(["model:mock-model-id"]);
    expect(keys[released]).toEqual([
      "model:mock-model-id",
      "model:mock-model-id:throttled",
      "model:mock-model-id#2",
    ]);
  });
});
