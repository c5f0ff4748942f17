// A crash while a step waits out its backoff charges nothing: the recovered execution
// waits for the recorded retryAt and runs attempt 2 then, with no WORKER_LOST attempt in
// between (docs/API.md, "Failures, retries, budgets"). Written with cairn/testing's own
// test engine, on both backends.

import { afterEach, describe, expect, it } from "vitest";
import { RateLimitError, type Store, workflow } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { createTestEngine } from "../src/testing/index.js";
import { BACKENDS, pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";

const drops: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of drops.splice(0)) await d();
});

function storeFor(backend: string): (() => Store) | undefined {
  if (backend === "sqlite" || !pgUrl) return undefined;
  const { schema, drop } = testSchema(pgUrl);
  drops.push(drop);
  return () => postgresStore(pgUrl as string, { schema });
}

describe.each(BACKENDS)("%s", (backend) => {
  it("a crash during a backoff is not charged; attempt 2 starts at the recorded retryAt", async () => {
    const wf = workflow({ name: "backoff-crash", version: "1" }, async (ctx) => {
      await ctx.step("before", () => 1);
      return ctx.step("limited", (s) => s.attempt);
    });
    const t = await createTestEngine({
      workflows: [wf],
      store: storeFor(backend),
      engineOptions: { leaseMs: 10_000, inProcessRetryMs: 600_000 },
      faults: [
        { call: "limited", throws: () => new RateLimitError("429", { retryAfter: "100s" }) },
      ],
    });
    const run = await t.start(wf, undefined);
    await t.advanceUntil(async () => {
      const steps = await t.engine.getSteps(run.id);
      return steps.some((s) => s.key === "limited" && s.status === "retrying");
    }, "the first attempt to fail");
    const retryAt = (await t.engine.getSteps(run.id)).find((s) => s.key === "limited")?.attempts[0]
      ?.retryAt;
    t.crash();
    await t.recover(); // 10 s later: still 90 s before retryAt
    expect(t.clock.now()).toBeLessThan(retryAt?.getTime() ?? 0);
    const done = await t.settle(run);
    expect(done.output).toBe(2);
    const limited = (await t.engine.getSteps(run.id)).find((s) => s.key === "limited");
    expect(limited?.attempts.map((a) => a.error?.code ?? "ok")).toEqual(["RATE_LIMIT", "ok"]);
    expect(limited?.attempts[1]?.startedAt.getTime()).toBeGreaterThanOrEqual(
      retryAt?.getTime() ?? Number.POSITIVE_INFINITY,
    );
  });
});
