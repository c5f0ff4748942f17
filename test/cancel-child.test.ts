// Canceling a child run that is not executing (waiting for an event, sleeping, pending, or
// paused) must end its parent's ctx.child with a RunCanceledError the parent can catch.
// The cancel used to mark the child canceled and tell the parent nothing: it waited forever.

import { describe, expect, it } from "vitest";
import { type AnyWorkflow, RunCanceledError, workflow } from "../src/index.js";
import { BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const waiter = workflow({ name: "kid-waits", version: "1" }, async (ctx) => {
  await ctx.waitForEvent("never");
});
const sleeper = workflow({ name: "kid-sleeps", version: "1" }, async (ctx) => {
  await ctx.sleep("long", "1h");
});
// Over budget before its first attempt: the run pauses.
const broke = workflow({ name: "kid-broke", version: "1", budget: { usd: 0 } }, async (ctx) => {
  await ctx.step("spend", () => 1);
});
// Registered with no engine here: its run stays pending.
const unserved = workflow({ name: "kid-unserved", version: "1" }, async () => "never runs");

function parentOf(kid: AnyWorkflow) {
  return workflow({ name: `parent-of-${kid.name}`, version: "1" }, async (ctx) => {
    try {
      await ctx.child("kid", kid, undefined);
      return { canceled: false };
    } catch (err) {
      return {
        canceled: err instanceof RunCanceledError,
        name: (err as Error).name,
        code: (err as { code?: string }).code,
        message: (err as Error).message,
      };
    }
  });
}

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  const cases: Array<{ state: string; kid: AnyWorkflow; status: string; wakeAt?: boolean }> = [
    { state: "waiting for an event", kid: waiter, status: "waiting" },
    { state: "sleeping", kid: sleeper, status: "waiting", wakeAt: true },
    { state: "pending", kid: unserved, status: "pending" },
    { state: "paused", kid: broke, status: "paused" },
  ];

  for (const c of cases) {
    it(`canceling a child that is ${c.state} ends the parent's ctx.child with RunCanceledError`, async () => {
      const h: Harness = harness();
      const parent = parentOf(c.kid);
      const served = c.kid === unserved ? [parent] : [parent, c.kid];
      const e = h.engine(served);
      const run = await e.start(parent, undefined, { id: "p" });
      const kid = await until(async () => {
        const [k] = await e.listRuns({ parentId: "p" });
        const p = await e.getRun("p");
        return k?.status === c.status && p?.status === "waiting" ? k : undefined;
      }, `the child to be ${c.status} and the parent waiting`);
      if (c.wakeAt) expect(kid.wakeAt).toBeDefined();
      await e.cancel(kid.id, "no longer needed");
      const out = await within(run.result(), 30_000, "the parent");
      expect(out).toEqual({
        canceled: true,
        name: "RunCanceledError",
        code: "RUN_CANCELED",
        message: `Run "${kid.id}" was canceled: no longer needed`,
      });
      expect((await e.getRun(kid.id))?.status).toBe("canceled");
      // The parent recorded the child's end: its step is failed with that error.
      const step = (await e.getSteps("p")).find((s) => s.key === "kid");
      expect(step?.status).toBe("failed");
      expect(step?.error?.code).toBe("RUN_CANCELED");
    });
  }
});
