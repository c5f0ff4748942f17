// Found by an adversarial review of child runs, cancel, resume and fork across generations:
// what each must return, replayed or forked, compared with the first execution.

import { describe, expect, it } from "vitest";
import { z } from "zod";
import { encode } from "../src/codec/codec.js";
import { createEngine, FatalError, type Store, workflow } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { crashSweep } from "../src/testing/index.js";
import { advanceUntil, BACKENDS, pgUrl, useHarness } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a fork from a child call never finished does not copy the failure that failed its source", async () => {
    const h = harness();
    let broken = true;
    let kidSteps = 0;
    const slowKid = workflow({ name: "slow-kid", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1h");
      return ctx.step("work", () => ++kidSteps);
    });
    // The child loses the race (its call is begun, never finished); then "last" fails the run.
    const parent = workflow({ name: "fork-unfinished", version: "1" }, async (ctx) => {
      const first = await ctx.step("first", () => "first");
      const raced = await Promise.race([
        ctx.child("kid", slowKid, undefined),
        ctx.sleep("deadline", "1s").then(() => "deadline" as const),
      ]);
      const last = await ctx.step("last", () => {
        if (broken) throw new FatalError("last is broken");
        return "last";
      });
      return { first, raced, last };
    });
    const e = h.engine([parent, slowKid]);
    const run = await e.start(parent, undefined, { id: "src" });
    await expect(advanceUntil(h.clock, run.result(), 500)).rejects.toThrow("last is broken");
    expect((await e.getSteps("src")).find((s) => s.key === "kid")?.status).toBe("waiting");

    broken = false;
    // The fork reuses the values before the child call ("first", and the race's winner), not
    // the uncaught failure of "last" (docs/API.md: "values and caught failures"): it executes
    // "last" again, as a fork from "last" or a resume would.
    const fork = await e.fork("src", { fromStep: "kid", id: "fork" });
    const out = await advanceUntil(h.clock, fork.result(), 500);
    expect(out).toEqual({ first: "first", raced: "deadline", last: "last" });
    expect((await e.getRun("src"))?.status).toBe("failed");
  });

  it("a crash after a child was created, before its intent, adopts that child whatever its schema's defaults draw", async () => {
    // A default drawn afresh each time the input is parsed (a request id, the time): the
    // child created before the crash holds another one than the call computes again.
    const kid = workflow(
      {
        name: "schema-kid",
        version: "1",
        input: z.object({
          n: z.number(),
          token: z.string().default(() => Math.random().toString(36)),
        }),
      },
      async (_ctx, input) => input.n * 2,
    );
    const parent = workflow({ name: "schema-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid, { n: 2 } as { n: number; token: string }),
    );
    const res = await crashSweep({
      workflows: [parent, kid],
      workflow: parent,
      input: undefined,
      filter: (b) => b.kind === "child" && b.point === "before-intent",
      ...(backend === "postgres" && {
        storage: () => {
          const { schema, drop } = testSchema(pgUrl as string);
          return { store: () => postgresStore(pgUrl as string, { schema }), cleanup: drop };
        },
      }),
    });
    expect(res.baseline.output).toBe(4);
    expect(res.boundaries.map((b) => b.crashed)).toEqual([true]);
    expect(res.failures).toEqual([]);
  });

  it("a caught child failure has the same stack on replay as on the first execution", async () => {
    const h = harness();
    const kid = workflow({ name: "stack-kid", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1s");
      throw new FatalError("kid failed");
    });
    const parent = workflow({ name: "stack-parent", version: "1" }, async (ctx) => {
      let stack = "";
      try {
        await ctx.child("kid", kid, undefined);
      } catch (err) {
        stack = String((err as Error).stack);
      }
      const first = await ctx.step("first", () => stack);
      await ctx.sleep("later", "1m");
      return { first, replayed: stack };
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "p" });
    await advanceUntil(
      h.clock,
      (async () => {
        while ((await e.getRun("p"))?.wakeAt === undefined)
          await new Promise((r) => setTimeout(r, 5));
      })(),
      100,
    );
    await e.close();
    // A new engine replays the child's recorded failure from the top.
    const e2 = h.engine([parent, kid]);
    const out = await advanceUntil(h.clock, e2.handle(parent, run.id).result(), 10_000);
    expect(out.first).toContain("kid failed");
    expect(out.replayed).toBe(out.first);
  });

  it("a child's output of exactly maxPayloadBytes reaches its parent; an error too big for it is a SerializationError", async () => {
    const h = harness();
    const limit = 1_000;
    let n = 0;
    while (Buffer.byteLength(encode("y".repeat(n + 1), Number.POSITIVE_INFINITY)) <= limit) n++;
    const kid = workflow({ name: "edge-kid", version: "1" }, async (ctx, big: boolean) => {
      await ctx.sleep("nap", 10);
      if (big) throw new FatalError("z".repeat(2 * limit));
      return "y".repeat(n);
    });
    const parent = workflow({ name: "edge-parent", version: "1" }, async (ctx) => {
      const out = await ctx.child("fits", kid, false);
      try {
        await ctx.child("too-big", kid, true);
        return { length: out.length };
      } catch (err) {
        return {
          length: out.length,
          name: (err as Error).name,
          code: (err as { code?: string }).code,
        };
      }
    });
    const e = h.engine([parent, kid], { maxPayloadBytes: limit });
    const run = await e.start(parent, undefined, { id: "p" });
    // The child stored its output: it was within the limit.
    expect(await advanceUntil(h.clock, run.result(), 50)).toEqual({
      length: n,
      name: "SerializationError",
      code: "SERIALIZATION",
    });
    expect((await e.getRun("p/fits"))?.output).toBe("y".repeat(n));
  });

  it("a resume re-awaits a failed child's current outcome, not a result event left from its earlier end", async () => {
    const h = harness();
    let broken = true;
    const kid = workflow({ name: "stale-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("go");
      return ctx.step("work", () => {
        if (broken) throw new FatalError("kid broken");
        return "kid ok";
      });
    });
    const parent = workflow({ name: "stale-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid, undefined),
    );
    const kidEngine = h.engine([kid]);
    // The child ends (its result event stored for the parent) after the parent's execution
    // read its events and before it asked the child's outcome: as when another worker
    // finishes the child meanwhile.
    const inner = h.store();
    let gated = true;
    const store = new Proxy(inner, {
      get(target, prop, recv) {
        if (prop === "getRun") {
          return async (id: string) => {
            if (id === "p/kid" && gated) {
              gated = false;
              await kidEngine.sendEvent("p/kid", "go");
              await until(
                async () => (await kidEngine.getRun("p/kid"))?.status === "failed",
                "kid fails",
              );
            }
            return target.getRun(id);
          };
        }
        const v = Reflect.get(target, prop, recv);
        return typeof v === "function" ? v.bind(target) : v;
      },
    }) as Store;
    const e = createEngine({ store, workflows: [parent], clock: h.clock, pollIntervalMs: 10 });
    try {
      const run = await e.start(parent, undefined, { id: "p" });
      await expect(run.result()).rejects.toThrow("kid broken");
      broken = false;
      await kidEngine.resume("p/kid");
      expect(await kidEngine.handle("p/kid").result()).toBe("kid ok");
      // docs/API.md, resume: "a failed child is re-awaited: its current outcome is used".
      await e.resume("p");
      expect(await run.result()).toBe("kid ok");
    } finally {
      await e.close();
    }
  });

  it("a fork from a call recorded after the failure that failed its source does not copy that failure", async () => {
    const h = harness();
    let broken = true;
    const kid = workflow({ name: "grace-kid", version: "1" }, async () => "kid");
    const parent = workflow({ name: "fork-grace", version: "1" }, async (ctx) => {
      const [bad, sibling] = await Promise.all([
        ctx.step("bad", () => {
          if (broken) throw new FatalError("bad is broken");
          return "bad";
        }),
        // Still running when "bad" fails the run: it finishes in the grace, recorded after.
        ctx.step("sibling", () => new Promise<string>((r) => setTimeout(() => r("sibling"), 50))),
      ]);
      return { bad, sibling, kid: await ctx.child("kid", kid, undefined) };
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "src" });
    await expect(run.result()).rejects.toThrow("bad is broken");
    expect((await e.getSteps("src")).map((s) => [s.key, s.status])).toEqual([
      ["bad", "failed"],
      ["sibling", "completed"],
    ]);
    broken = false;
    const fork = await e.fork("src", { fromStep: "sibling", id: "fork" });
    expect(await advanceUntil(h.clock, fork.result(), 100)).toEqual({
      bad: "bad",
      sibling: "sibling",
      kid: "kid",
    });
  });

  it("ctx.child given something else than a workflow is a TypeError naming the call", async () => {
    const h = harness();
    const parent = workflow({ name: "not-a-workflow", version: "1" }, async (ctx) => {
      try {
        return await ctx.child("review", undefined as never, 1);
      } catch (err) {
        return `${(err as Error).name}: ${(err as Error).message}`;
      }
    });
    const e = h.engine([parent]);
    const run = await e.start(parent, undefined, { id: "p" });
    expect(await advanceUntil(h.clock, run.result(), 100)).toBe(
      'TypeError: ctx.child("review") in run "p": the second argument must be a workflow made with workflow() (got undefined)',
    );
  });
});
