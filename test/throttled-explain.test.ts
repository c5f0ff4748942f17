// A run throttled by cairn/ai's shared rate limiter (its model call asked for a wait longer
// than it sleeps in process, so the wrapper sleeps durably in "model:<id>:throttled")
// showed in `cairn runs`, `cairn show` and `cairn result` as "sleeping until T", as if the
// workflow had called ctx.sleep. It now says it waits for the rate limit of which model,
// until when; a plain ctx.sleep still reads as sleeping.

import { join } from "node:path";
import { generateText } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Ai, createAi } from "../src/ai/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { textAnswer } from "./fixtures/ai-agent.js";
import { cairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

describe("cairn runs / show / result of a run throttled by the rate limiter (SQLite)", () => {
  const dir = tempDir("cairn-throttle-");
  const path = join(dir.dir, "cairn.db");
  const store = ["--store", `sqlite:${path}`];
  let engine: Engine;
  let ai: Ai;
  let calls = 0;
  let wakeAt = "";

  beforeAll(async () => {
    const db = sqliteStore(path);
    // One request a minute, and no wait in process: the second run's call sleeps durably.
    ai = createAi({
      store: db,
      limits: { "mock-provider:*": { requestsPerMinute: 1 } },
      maxInProcessWaitMs: 1,
    });
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls++;
        return textAnswer("ok");
      },
    });
    const asks = workflow({ name: "asks", version: "1" }, async (ctx, _n: number) => {
      const r = await generateText({ model: ai.model(ctx, model), prompt: "hi" });
      return r.text;
    });
    const naps = workflow({ name: "naps", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1h");
    });
    engine = createEngine({ store: db, workflows: [asks, naps], pollIntervalMs: 20 });
    await (await engine.start(asks, 1, { id: "first" })).result();
    await engine.start(asks, 2, { id: "throttled" });
    await engine.start(naps, undefined, { id: "napping" });
    const run = await until(async () => {
      const r = await engine.getRun("throttled");
      return r?.status === "waiting" && r.wakeAt ? r : undefined;
    }, "the second run throttled");
    wakeAt = run.wakeAt!.toISOString();
    await until(async () => (await engine.getRun("napping"))?.status === "waiting", "napping");
  });
  afterAll(async () => {
    await engine.close();
    await ai.close();
    dir.cleanup();
  });

  const said = () =>
    `waiting for the rate limit of model "mock-model-id" (requests or tokens per minute, shared by all workers) until ${wakeAt}`;

  it("the throttled run's call never reached the model", () => {
    expect(calls).toBe(1);
  });

  it("cairn runs and cairn runs --json say it waits for the rate limit", async () => {
    const listed = await cairn(["runs", "--json", ...store]);
    expect(listed.code, listed.stderr).toBe(0);
    const rows = JSON.parse(listed.stdout) as Array<{ id: string; why: string }>;
    expect(rows.find((r) => r.id === "throttled")?.why).toBe(said());
    expect(rows.find((r) => r.id === "napping")?.why).toMatch(/^sleeping until /);
    const table = await cairn(["runs", ...store]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain("waiting for the rate limit of model");
  });

  it("cairn show and cairn result say so too", async () => {
    const shown = await cairn(["show", "throttled", "--json", ...store]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(JSON.parse(shown.stdout).why).toBe(said());
    const result = await cairn(["result", "throttled", ...store]);
    expect(result.code).toBe(3);
    expect(result.stderr).toContain(`(${said()})`);
  });
});
