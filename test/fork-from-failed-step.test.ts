// fork from a call that never completed (a step that failed): the fork keeps every completed
// call and executes that one again with fresh attempts. The source run is not touched.

import { describe, expect, it } from "vitest";
import { FatalError, RunConflictError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

describe.each(BACKENDS)("fork from a failed step on %s", (backend) => {
  const harness = useHarness(backend);

  it("reuses the completed steps and runs the failed one afresh", async () => {
    const h = harness();
    const ran: string[] = [];
    let broken = true;
    const wf = workflow({ name: "flaky", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", () => {
        ran.push("a");
        return 1;
      });
      const b = await ctx.step("b", () => {
        ran.push("b");
        if (broken) throw new FatalError("b is broken");
        return 2;
      });
      return a + b;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined, { id: "src" });
    await expect(run.result()).rejects.toThrow("b is broken");
    const before = await engine.getSteps("src");

    broken = false;
    const fork = await engine.fork("src", { fromStep: "b", id: "fixed" });
    expect(await fork.result()).toBe(3);
    expect(ran).toEqual(["a", "b", "b"]);
    const steps = await engine.getSteps("fixed");
    expect(steps.find((s) => s.key === "b")?.attempts).toHaveLength(1);
    expect(await engine.getSteps("src")).toEqual(before);
    expect((await engine.getRun("src"))?.status).toBe("failed");

    const err = await engine.fork("src", { fromStep: "zzz" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RunConflictError);
    expect((err as Error).message).toContain("fork from one of: a, b");
  });
});
