import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../index.js";
import { createSideEffectCounter, createTestEngine, waitForStatus } from "./index.js";

describe("createTestEngine", () => {
  it("worker death: crash inside a call, recover after the lease; the cut call shows WORKER_LOST", async () => {
    const effects = createSideEffectCounter();
    const wf = workflow({ name: "deployer", version: "1" }, async (ctx) => {
      await ctx.step("build", () => "built");
      return ctx.step("deploy", (s) => {
        effects.record("deploy", s.idempotencyKey);
        return s.attempt;
      });
    });
    const t = await createTestEngine({
      workflows: [wf],
      sideEffects: effects,
      faults: [{ call: "deploy", run: () => t.crash() }],
    });
    const run = await t.start(wf, undefined);
    await t.advanceUntil(() => t.crashed, "the crash");
    const before = t.clock.now();
    await t.recover();
    expect(t.clock.now() - before).toBeGreaterThan(10_000);
    const done = await t.settle(run);
    expect(done.output).toBe(2);
    const steps = await t.engine.getSteps(run.id);
    expect(
      steps.find((s) => s.key === "deploy")?.attempts.map((a) => a.error?.code ?? "ok"),
    ).toEqual(["WORKER_LOST", "ok"]);
    expect(effects.counts()).toEqual({ deploy: 1 });
  });

  it("what a crashed engine's steps still do after the crash is not counted", async () => {
    // In process, the dead engine's JavaScript goes on: a parallel step that records after
    // the crash would not have run in a killed process.
    const effects = createSideEffectCounter();
    let bAttempts = 0;
    const wf = workflow({ name: "pair", version: "1" }, async (ctx) =>
      Promise.all([
        ctx.step("a", () => "a"),
        ctx.step("b", async () => {
          bAttempts++;
          await new Promise((r) => setTimeout(r, 100));
          effects.record("b");
          return "b";
        }),
      ]),
    );
    const t = await createTestEngine({
      workflows: [wf],
      sideEffects: effects,
      // The engine dies as a starts, once b's function has started (a function never
      // starts on a dead engine, as in a killed process).
      faults: [
        {
          call: "a",
          run: async () => {
            while (bAttempts === 0) await new Promise((r) => setTimeout(r, 1));
            t.crash();
          },
        },
      ],
    });
    const run = await t.start(wf, undefined);
    await t.advanceUntil(() => t.crashed, "the crash");
    await t.recover();
    expect((await t.settle(run)).output).toEqual(["a", "b"]);
    // Let the dead engine's b finish its sleep and record.
    await new Promise((r) => setTimeout(r, 150));
    expect(bAttempts).toBe(2);
    expect(effects.counts()).toEqual({ b: 1 });
    await t.close();
  });

  it("a dead engine's store never answers; recover() before crash() is refused", async () => {
    const wf = workflow({ name: "idle", version: "1" }, async () => 1);
    const t = await createTestEngine({ workflows: [wf] });
    await expect(t.recover()).rejects.toThrow(/has not crashed/);
    const dead = t.engine;
    t.crash();
    const answer = await Promise.race([
      dead.getRun("x").then(() => "answered"),
      new Promise((r) => setTimeout(() => r("silent"), 50)),
    ]);
    expect(answer).toBe("silent");
    await t.recover();
    const run = await t.start(wf, undefined);
    expect((await t.settle(run)).output).toBe(1);
    await t.close();
    await t.close();
  });

  it("fault scripts: FatalError on call 2 fails the run; bad scripts are refused by name", async () => {
    const wf = workflow({ name: "fatal", version: "1" }, async (ctx) => {
      await ctx.step("one", () => 1);
      return ctx.step("two", () => 2);
    });
    const t = await createTestEngine({
      workflows: [wf],
      faults: [{ call: 2, throws: new FatalError("no") }],
    });
    const done = await t.settle(await t.start(wf, undefined));
    expect(done.status).toBe("failed");
    expect(done.error?.message).toBe("no");
    await expect(createTestEngine({ workflows: [wf], faults: [{ call: 0 }] })).rejects.toThrow(
      /call must be a 1-based call number or a step key \(got 0\)/,
    );
    await expect(
      createTestEngine({ workflows: [wf], faults: [{ call: "two", times: -1 }] }),
    ).rejects.toThrow(/fault script for call "two": times/);
  });

  it("waitForStatus names the run, the status wanted and the one it has", async () => {
    const wf = workflow({ name: "waits", version: "1" }, async (ctx) =>
      ctx.waitForEvent("go", { timeout: "1h" }),
    );
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined, { id: "run-\u{1F600}" });
    await waitForStatus(run, "waiting");
    await expect(waitForStatus(t.engine, run.id, "completed", { timeoutMs: 30 })).rejects.toThrow(
      /run "run-\u{1F600}" did not become completed: it is waiting; gave up because 30 ms passed/u,
    );
    await t.timeOutWait(run, "go");
    expect((await t.settle(run)).output).toEqual({ timedOut: true });
    await expect(waitForStatus(run, "waiting")).rejects.toThrow(/it finished/);
    await expect(waitForStatus(t.engine, "nope", "waiting", { timeoutMs: 20 })).rejects.toThrow(
      /run "nope" did not become waiting: no such run exists/,
    );
  });

  it("timeOutWait refuses a wait that has no timeout, saying what to do", async () => {
    const wf = workflow({ name: "forever", version: "1" }, async (ctx) =>
      ctx.waitForEvent("never"),
    );
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined);
    await expect(t.timeOutWait(run, "never")).rejects.toThrow(
      /waits for "never" without a timeout/,
    );
  });

  it("a closed test engine refuses new runs with the engine's own error", async () => {
    const wf = workflow({ name: "closed", version: "1" }, async () => 1);
    const t = await createTestEngine({ workflows: [wf] });
    await t.close();
    await expect(t.start(wf, undefined)).rejects.toThrow(/closed/i);
  });

  it("settle on a crashed engine says to recover first", async () => {
    const wf = workflow({ name: "crashy", version: "1" }, async (ctx) => {
      await ctx.step("one", () => 1);
      return ctx.step("two", () => 2);
    });
    const t = await createTestEngine({
      workflows: [wf],
      faults: [{ call: 2, run: () => t.crash() }],
    });
    const run = await t.start(wf, undefined);
    await expect(t.settle(run)).rejects.toThrow(
      /the engine crashed while run "run_[^"]+" was not finished; call recover\(\)/,
    );
    await t.recover();
    expect((await t.settle(run)).output).toBe(2);
  });
});
