// The payload of an event is read when a wait takes it (Context.eventPayload), an await the
// first execution has between the take and the record that a replay has not. Shapes where
// that could change which branch wins, or what a key is named, run to a restart and replay:
// a race of two waits of different names with both events pending, a wait racing a step,
// waits in Promise.all beside a child's result and an approval, a loop of waits over more pending events of
// its name than one read takes. Both backends.

import { describe, expect, it } from "vitest";
import { type WaitResult, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const got = <T>(w: WaitResult<T>): T | undefined => (w.timedOut ? undefined : w.payload);

const kid = workflow({ name: "kid", version: "1" }, async (ctx) => ctx.step("k", () => "kid-out"));

const shapes = workflow({ name: "shapes", version: "1" }, async (ctx) => {
  const raced = await Promise.race([
    ctx.waitForEvent<string>("a").then((w) => `a:${got(w)}`),
    ctx.waitForEvent<string>("b").then((w) => `b:${got(w)}`),
  ]);
  // A key named after the winner: a replay with another winner diverges.
  await ctx.step(`after-${raced}`, () => raced);
  const withStep = await Promise.race([
    ctx.waitForEvent<string>("c").then((w) => `c:${got(w)}`),
    ctx.step("s", () => "step"),
  ]);
  await ctx.step(`after-${withStep}`, () => withStep);
  const all = await Promise.all([
    ctx.waitForEvent<string>("d").then(got),
    ctx.child("kid", kid, undefined),
    ctx.waitForEvent<string>("e").then(got),
    ctx.approval("go-ahead", { request: "deploy" }).then((a) => a.approved),
  ]);
  const loop: unknown[] = [];
  for (let i = 0; i < 40; i++) loop.push(got(await ctx.waitForEvent<number>("y")));
  await ctx.waitForEvent("go");
  const rest = await Promise.all([ctx.waitForEvent<string>("b"), ctx.waitForEvent<string>("a")]);
  return { raced, withStep, all, loop, rest: rest.map(got) };
});

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("every shape resolves on replay as on its first execution", async () => {
    const h = harness();
    const client = h.engine([], { worker: false });
    await client.start(shapes, undefined, { id: "s" });
    for (const [name, v] of [
      ["a", "A1"],
      ["b", "B1"],
      ["c", "C1"],
      ["d", "D1"],
      ["e", "E1"],
      ["a", "A2"],
      ["b", "B2"],
    ] as const) {
      await client.sendEvent("s", name, v);
    }
    for (let i = 0; i < 40; i++) await client.sendEvent("s", "y", i);
    const e1 = h.engine([shapes, kid]);
    // The approval is answered once asked (the other calls of its Promise.all took events).
    await until(
      () =>
        e1.approve("s", "go-ahead", { by: "alice" }).then(
          () => true,
          () => false,
        ),
      "the approval asked and answered",
    );
    await until(async () => (await e1.getRun("s"))?.waitingFor?.includes("go") === true, "go");
    const firstSteps = (await e1.getSteps("s")).map((s) => s.key);
    await e1.close();
    const e2 = h.engine([shapes, kid]);
    await e2.sendEvent("s", "go", null);
    const out = (await advanceUntil(h.clock, e2.handle("s").result(), 100)) as {
      raced: string;
      withStep: string;
      all: unknown[];
      loop: unknown[];
      rest: unknown[];
    };
    expect((await e2.getRun("s"))?.status).toBe("completed");
    expect(firstSteps).toContain(`after-${out.raced}`);
    expect(firstSteps).toContain(`after-${out.withStep}`);
    expect(out.all).toEqual(["D1", "kid-out", "E1", true]);
    expect(out.loop).toEqual(Array.from({ length: 40 }, (_, i) => i));
    // The race's loser took its event too (both were pending): the later waits take the next.
    expect(out.rest).toEqual(["B2", "A2"]);
  });
});
