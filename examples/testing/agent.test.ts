// Testing a workflow's failed middle, as a cairn user would (copy this file): a rate limit
// on call 7 of 12, an approval that times out, a worker killed between a tool call and its
// checkpoint (and at every other durable boundary), and version 2 deployed mid-run. The
// last test shows the crash sweep catching a broken workflow.

import { RateLimitError, workflow } from "cairn";
import {
  crashSweep,
  createSideEffectCounter,
  createTestEngine,
  waitForStatus,
} from "cairn/testing";
import { describe, expect, it } from "vitest";
import { defineAgent, TOOLS } from "./agent.js";
import { fakeServices } from "./fake-services.js";

const APPROVE = [{ name: "approval", payload: { approved: true } }];

describe("fix-issue agent", () => {
  it("a rate limit on call 7 of 12 is waited out; every tool runs once, one pull request", async () => {
    const effects = createSideEffectCounter();
    const services = fakeServices(effects);
    const agent = defineAgent(services);
    const t = await createTestEngine({
      workflows: [agent],
      sideEffects: effects,
      faults: [
        {
          call: 7,
          throws: () => new RateLimitError("429 from the tool service", { retryAfter: "30s" }),
          times: 2,
        },
      ],
    });
    const run = await t.start(agent, { issue: 42 });
    const done = await t.settle(run, { events: APPROVE });
    expect(done.status).toBe("completed");
    expect(done.output).toMatchObject({ outcome: "opened", pullRequest: 1 });
    expect(effects.counts()).toEqual({ "pull-request": 1, "tool-call": TOOLS.length });
    const seventh = (await t.engine.getSteps(run.id)).find((s) => s.key === "tool:search-docs");
    expect(seventh?.attempts.map((a) => a.error?.code ?? "ok")).toEqual([
      "RATE_LIMIT",
      "RATE_LIMIT",
      "ok",
    ]);
  });

  it("an approval nobody answers times out after two days: no pull request", async () => {
    const effects = createSideEffectCounter();
    const agent = defineAgent(fakeServices(effects));
    const t = await createTestEngine({ workflows: [agent], sideEffects: effects });
    const run = await t.start(agent, { issue: 7 });
    const started = t.clock.now();
    await t.timeOutWait(run, "approval");
    const done = await t.settle(run);
    expect(done.output).toMatchObject({ outcome: "abandoned" });
    expect(t.clock.now() - started).toBeGreaterThanOrEqual(2 * 24 * 3600_000);
    expect(effects.counts()["pull-request"]).toBeUndefined();
  });

  it("killed between a tool call and its checkpoint: the call repeats with the same key, nothing doubles", async () => {
    const effects = createSideEffectCounter();
    const services = fakeServices(effects);
    const agent = defineAgent(services);
    const sweep = await crashSweep({
      workflows: [agent],
      workflow: agent,
      input: { issue: 42 },
      events: APPROVE,
      sideEffects: effects,
      reset: () => services.reset(),
      filter: (b) => b.key === "tool:edit-file" && b.point === "before-record",
    });
    expect(sweep.boundaries.map((b) => b.boundary.label)).toEqual([
      `after step "tool:edit-file" returned, before its record`,
    ]);
    expect(sweep.failures).toEqual([]);
    // The tool service saw the call twice (at least once per attempt) under one key.
    expect(services.toolCalls).toBe(TOOLS.length + 1);
    expect(sweep.boundaries[0]?.sideEffects).toEqual({ "pull-request": 1, "tool-call": 10 });
  });

  it("crashed at every durable boundary, the run ends as the undisturbed one did", async () => {
    const effects = createSideEffectCounter();
    const services = fakeServices(effects);
    const agent = defineAgent(services);
    const sweep = await crashSweep({
      workflows: [agent],
      workflow: agent,
      input: { issue: 42 },
      events: APPROVE,
      sideEffects: effects,
      reset: () => services.reset(),
    });
    expect(sweep.baseline.sideEffects).toEqual({ "pull-request": 1, "tool-call": 10 });
    expect(sweep.failures).toEqual([]);
    // Every boundary was crashed at (one not reached would have tested nothing).
    expect(sweep.boundaries.filter((b) => !b.crashed)).toEqual([]);
    const labels = sweep.boundaries.map((b) => b.boundary.label);
    expect(labels).toContain(`between effect "open-pr"'s intent and its perform`);
    expect(labels).toContain(`between effect "open-pr"'s perform and its completion record`);
    expect(labels).toContain(`during wait "approval"`);
  });

  it("version 2 deployed mid-run: the in-flight run finishes on version 1, new runs use 2", async () => {
    const effects = createSideEffectCounter();
    const services = fakeServices(effects);
    const v1 = defineAgent(services, "1");
    const v2 = defineAgent(services, "2");
    const t = await createTestEngine({ workflows: [v1], sideEffects: effects });
    const old = await t.start(v1, { issue: 1 });
    await waitForStatus(old, "waiting"); // at the approval
    await t.deploy([v1, v2]); // both versions: in-flight runs keep the code they started with
    const fresh = await t.start("fix-issue", { issue: 2 });
    const [a, b] = await Promise.all([
      t.settle(old, { events: APPROVE }),
      t.settle(fresh, { events: APPROVE }),
    ]);
    expect([a.version, (a.output as { notes: string[] }).notes.length]).toEqual(["1", 10]);
    expect([b.version, (b.output as { notes: string[] }).notes.length]).toEqual(["2", 11]);
    expect(effects.counts()["pull-request"]).toBe(2);
  });

  it("the sweep catches a side effect outside any step and a perform without reconcile", async () => {
    const effects = createSideEffectCounter();
    let prs = 0;
    const broken = workflow({ name: "broken-agent", version: "1" }, async (ctx) => {
      effects.record("slack-message"); // outside any step: runs again on every replay
      await ctx.step("plan", () => "plan");
      return ctx.effect("open-pr", {
        perform: () => {
          effects.record("pull-request");
          return ++prs;
        },
        reconcile: () => undefined, // never looks: a resume opens a second pull request
      });
    });
    const sweep = await crashSweep({
      workflows: [broken],
      workflow: broken,
      input: undefined,
      sideEffects: effects,
      reset: () => {
        prs = 0;
      },
    });
    expect(sweep.failures).toContain(
      `crash between effect "open-pr"'s perform and its completion record (run "crash-sweep"): ` +
        `its output is 2 instead of 1; side effect "pull-request" happened 2 times (undisturbed: 1); ` +
        `side effect "slack-message" happened 2 times (undisturbed: 1)`,
    );
    expect(sweep.failures).toContain(
      `crash after step "plan"'s record (run "crash-sweep"): side effect "slack-message" happened 2 times (undisturbed: 1)`,
    );
  });
});
