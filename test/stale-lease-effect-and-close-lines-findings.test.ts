// Findings of an adversarial review of close() always ending and of runs held for step
// bodies. Each test failed on the code it was written against, and stays as the
// regression test of its mend.

import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach, lifecycleLines } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around, gate } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();

describe.each(BACKENDS)("%s: close() past its grace with a step still running", (backend) => {
  // Before: close() stopped the execution (stopWithoutWriting) and its end was reported as a
  // "lease-lost" line, "another worker has it", while the run stayed leased to this worker
  // and no other worker could have it (cairn worker printed it on every such SIGTERM).
  it("does not report the run's lease lost; it says the run stays leased here", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const latch = gate();
    cleanups.push(latch.open);
    const began = gate();
    const wf = workflow({ name: "deaf", version: "1" }, async (ctx) =>
      ctx.step("slow", async () => {
        began.open();
        await latch.opened; // deaf to its signal
        return "slow";
      }),
    );
    const lines = lifecycleLines();
    const problems: string[] = [];
    const engine = createEngine({
      store: makeStore(),
      workflows: [wf],
      clock: createVirtualClock(),
      pollIntervalMs: 10,
      closeGraceMs: 50,
      abortGraceMs: 20,
      logger: { ...lines.logger, warn: (_f: object, m: string) => problems.push(m) },
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await began.opened;
    await until(() => lines.events.some((e) => e.event === "claimed"), "claimed");
    await engine.close();
    expect(lines.events.filter((e) => e.runId === "r").map((e) => e.event)).toEqual(["claimed"]);
    expect(problems.some((m) => m.includes(`run "r" stays leased to this worker`))).toBe(true);
  });
});

describe.each(BACKENDS)(
  "%s: an effect whose worker finds its lease stale before perform",
  (backend) => {
    // Before: the effect's attempt stopped the execution (the lease may be another worker's)
    // and returned a promise that never settles. That promise counted as a step body still
    // running here for ever (bodiesInFlight), so the worker held the run for it: never
    // handed back, never executed again. A lone worker (the embedded default) left the run
    // running for good, its intent recorded and its effect never performed. Found by a
    // PostgreSQL soak under load, where the virtual clock outran the heartbeat.
    it("the run is handed back once its lease has run out, and completes", async () => {
      const makeStore = freshStorage(backend, cleanups);
      const clock = createVirtualClock();
      const aBegun = gate();
      const beforeEffect = gate();
      const renewalsHang = { on: false };
      const hung = gate();
      cleanups.push(hung.open);
      const performed: string[] = [];
      const wf = workflow({ name: "stale-before-perform", version: "1" }, async (ctx) => {
        await ctx.step("a", () => {
          aBegun.open();
          return beforeEffect.opened.then(() => "a");
        });
        return ctx.effect("fx", {
          perform: (key) => {
            performed.push(key);
            return "done";
          },
          reconcile: (key) => (performed.includes(key) ? "done" : undefined),
        });
      });
      const engine = createEngine({
        // The heartbeat's renewal goes unanswered (a slow store): the worker's own clock then
        // says the lease may have run out.
        store: around(makeStore(), {
          renewLeases: async (call, ...args) => {
            if (renewalsHang.on) await hung.opened;
            return call(...args);
          },
        }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
        leaseMs: 1_000,
        heartbeatMs: 100,
        log: () => {},
      });
      cleanups.push(() => engine.close());
      await engine.start(wf, undefined, { id: "r" });
      await aBegun.opened;
      renewalsHang.on = true;
      await clock.advance(1_500);
      beforeEffect.open();
      await until(
        async () => (await engine.getSteps("r")).find((s) => s.key === "fx") !== undefined,
        "the effect's intent recorded",
      );
      // The store's lease (1 s from the claim) has run out, and no other worker takes the run
      // over: this worker hands it back itself and executes it again, performing once.
      await until(
        async () => (await engine.getRun("r"))?.status === "completed",
        "the run completed",
        10_000,
      );
      expect(performed.length).toBe(1);
    });
  },
);
