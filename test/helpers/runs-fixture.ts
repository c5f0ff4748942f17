// A store with runs in every status, for the HTTP API and dashboard tests (and the
// dashboard screenshots): completed (with a retried step), failed (attempts, then a fatal
// error), waiting for an event, sleeping, paused over budget, paused because no live worker
// has its version, canceled, running (a step held open), pending, and a run whose worker
// died mid-step and was taken over (a WORKER_LOST attempt).
//
// Steps "work" by sleeping on the virtual clock, so durations on the timeline are real
// numbers; the seeding advances the clock until each run reaches the state it needs.

import {
  type AnyWorkflow,
  type Engine,
  FatalError,
  RateLimitError,
  type Store,
  type Workflow,
  workflow,
} from "../../src/index.js";
import { type FaultPlan, faultyStore } from "../../src/testing/index.js";
import { advanceUntil, type Harness } from "./engines.js";
import { until } from "./sqlite.js";

export interface Seeded {
  /** Executes runs of every workflow below except legacy@0 and later@1. */
  worker: Engine;
  /** A client (worker: false) with every workflow registered: what the HTTP app gets. */
  client: Engine;
  ids: {
    completed: string;
    failed: string;
    waitingEvent: string;
    sleeping: string;
    pausedBudget: string;
    pausedVersion: string;
    canceled: string;
    running: string;
    pending: string;
    crashed: string;
  };
  workflows: Workflow<unknown, unknown>[];
  /** Lets the running run's held step finish. */
  releaseRunning(): void;
}

export function makeWorkflows(h: Harness) {
  const work = (ms: number) => h.clock.sleep(ms);
  let releaseGate!: () => void;
  const gate = new Promise<void>((resolve) => {
    releaseGate = resolve;
  });

  const triage = workflow(
    { name: "triage", version: "1" },
    async (ctx, input: { issue: number }) => {
      const issue = await ctx.step("fetch-issue", async (s) => {
        await work(900);
        s.spend({ tokens: 1200, usd: 0.02 });
        return { number: input.issue, title: `Crash on start (#${input.issue})`, labels: ["bug"] };
      });
      const plan = await ctx.step(
        "plan",
        async (s) => {
          await work(2_400);
          if (s.attempt === 1)
            throw new RateLimitError("429 from the model provider", { retryAfter: "3s" });
          s.spend({ tokens: 5400, usd: 0.11 });
          return { steps: ["reproduce", "patch config loader", "add regression test"] };
        },
        { retry: { maxAttempts: 3, initialDelay: "1s", jitter: false } },
      );
      for (const edit of ["src/config.ts", "test/config.test.ts"]) {
        await ctx.step("edit", async () => {
          await work(700);
          return { file: edit, lines: 12 };
        });
      }
      await ctx.sleep("ci-settle", "20s");
      const pr = await ctx.effect("open-pr", {
        perform: async () => {
          await work(1_100);
          return { url: `https://forge.example/pr/${input.issue}` };
        },
        reconcile: async () => undefined,
      });
      return { issue, plan, pr };
    },
  );

  const deploy = workflow(
    { name: "deploy", version: "1" },
    async (ctx, input: { service: string }) => {
      await ctx.step("build", async (s) => {
        await work(3_000);
        s.spend({ usd: 0.04 });
        return { image: `${input.service}:sha-4f2a` };
      });
      const approval = await ctx.waitForEvent<{ ok: boolean; by: string }>("approval", {
        timeout: "2d",
      });
      if (approval.timedOut || !approval.payload.ok) return { deployed: false };
      await ctx.step("roll-out", async () => {
        await work(1_500);
        return { replicas: 3 };
      });
      return { deployed: true, by: approval.payload.by };
    },
  );

  const coolDown = workflow({ name: "cool-down", version: "1" }, async (ctx) => {
    await ctx.step("snapshot", async () => {
      await work(400);
      return "ok";
    });
    await ctx.sleep("cool-down", "1h");
    return "done";
  });

  const budget = workflow({ name: "research", version: "1", budget: { usd: 1 } }, async (ctx) => {
    for (const topic of ["sources", "summaries", "draft", "review"]) {
      await ctx.step(topic, async (s) => {
        await work(1_200);
        s.spend({ usd: 0.45, tokens: 9000 });
        return { topic };
      });
    }
    return "published";
  });

  const fix = workflow({ name: "fix-tests", version: "1" }, async (ctx) => {
    await ctx.step("checkout", async () => {
      await work(600);
      return { sha: "4f2a9c1" };
    });
    await ctx.step(
      "run-tests",
      async (s) => {
        await work(1_800);
        s.spend({ usd: 0.01 });
        if (s.attempt < 3) throw new Error(`2 tests failed: config.test.ts (attempt ${s.attempt})`);
        throw new FatalError("The test runner crashed: out of memory");
      },
      { retry: { maxAttempts: 3, initialDelay: "2s", jitter: false } },
    );
    return "green";
  });

  const long = workflow({ name: "index-repo", version: "1" }, async (ctx) => {
    await ctx.step("clone", async () => {
      await work(500);
      return "cloned";
    });
    await ctx.step("embed", async () => {
      await gate;
      return "embedded";
    });
    return "indexed";
  });

  const crashy = workflow({ name: "migrate", version: "1" }, async (ctx) => {
    await ctx.step("plan", async () => {
      await work(800);
      return { tables: 4 };
    });
    await ctx.step("copy-rows", async (s) => {
      // The first attempt's worker dies here (the seeding cuts it off from the store).
      if (s.attempt === 1) await new Promise(() => {});
      await work(2_000);
      return { rows: 120_000 };
    });
    await ctx.step("verify", async () => {
      await work(600);
      return "ok";
    });
    return "migrated";
  });

  const legacy = workflow({ name: "triage", version: "0" }, async () => "old");
  const later = workflow({ name: "nightly", version: "1" }, async () => "later");

  return {
    triage,
    deploy,
    coolDown,
    budget,
    fix,
    long,
    crashy,
    legacy,
    later,
    releaseGate: () => releaseGate(),
  };
}

async function statusOf(engine: Engine, id: string): Promise<string | undefined> {
  return (await engine.getRun(id))?.status;
}

export async function seedRuns(h: Harness): Promise<Seeded> {
  const w = makeWorkflows(h);
  const executed = [w.triage, w.deploy, w.coolDown, w.budget, w.fix, w.long, w.crashy];
  const all = [...executed, w.legacy, w.later] as Workflow<unknown, unknown>[];
  const client = h.engine(all, { worker: false });

  // The crashed run first: a worker that stops talking to the store mid-step (as a killed
  // process does) leaves its lease to expire; the next worker takes the run over.
  const plan: FaultPlan = { failing: new Set() };
  const doomed = h.engine([w.crashy], {
    store: faultyStore(h.store(), plan),
    leaseMs: 30_000,
    closeGraceMs: 0,
    log: () => {},
  });
  const crashed = await doomed.start(w.crashy, undefined, { id: "migrate-orders" });
  await advanceUntil(
    h.clock,
    until(async () => {
      const steps = await client.getSteps(crashed.id);
      return steps.some((s) => s.key === "plan" && s.status === "completed");
    }, "migrate-orders records plan"),
    100,
  );
  const cutOff: Array<keyof Store> = [
    "renewLeases",
    "appendRecords",
    "releaseRun",
    "heartbeatWorker",
    "claimRuns",
    "markUnserved",
    "listWorkers",
    "registerWorker",
  ];
  for (const verb of cutOff) plan.failing?.add(verb);
  await h.clock.advance("31s");

  const worker = h.engine(executed, { leaseMs: 30_000, heartbeatMs: 50, closeGraceMs: 200 });
  const started = async (wf: AnyWorkflow, input: unknown, id: string) =>
    (await client.start(wf, input, { id })).id;

  const completed = await started(w.triage, { issue: 4812 }, "triage-4812");
  const failed = await started(w.fix, undefined, "fix-tests-main");
  const waitingEvent = await started(w.deploy, { service: "api" }, "deploy-api-prod");
  const sleeping = await started(w.coolDown, undefined, "cool-down-eu");
  const pausedBudget = await started(w.budget, undefined, "research-pricing");
  const canceled = await started(w.coolDown, undefined, "cool-down-us");
  const running = await started(w.long, undefined, "index-monorepo");
  const targets: Record<string, (s: string | undefined) => boolean> = {
    [crashed.id]: (s) => s === "completed",
    [completed]: (s) => s === "completed",
    [failed]: (s) => s === "failed",
    [waitingEvent]: (s) => s === "waiting",
    [sleeping]: (s) => s === "waiting",
    [pausedBudget]: (s) => s === "paused",
    [canceled]: (s) => s === "waiting",
  };
  await advanceUntil(
    h.clock,
    until(
      async () => {
        for (const [id, ok] of Object.entries(targets))
          if (!ok(await statusOf(client, id))) return false;
        return (await client.getSteps(running)).some((s) => s.key === "clone");
      },
      "every seeded run in its state",
      60_000,
    ),
    250,
    4_000,
  );
  await client.cancel(canceled, "not needed after all");

  // No live worker has triage@0: the worker reports the run paused once it is ready.
  const pausedVersion = await started(w.legacy, { issue: 1 }, "triage-legacy-77");
  await h.clock.advance("10s");
  await until(
    async () => (await statusOf(client, pausedVersion)) === "paused",
    "legacy run paused",
  );
  // Created last, with the clock still: nothing has looked at it yet.
  const pending = await started(w.later, undefined, "nightly-2026-01-02");

  return {
    worker,
    client,
    workflows: all,
    releaseRunning: w.releaseGate,
    ids: {
      completed,
      failed,
      waitingEvent,
      sleeping,
      pausedBudget,
      pausedVersion,
      canceled,
      running,
      pending,
      crashed: crashed.id,
    },
  };
}
