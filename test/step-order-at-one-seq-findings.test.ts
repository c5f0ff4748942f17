// Adversarial findings on the paged journal reads (readSteps / readEvents) and the live feed.

import { describe, expect, it } from "vitest";
import { type Engine, FatalError, type StepView, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

/** Every page of readSteps, `limit` calls at a time, following `next`. */
async function allPages(e: Engine, id: string, limit: number): Promise<StepView[]> {
  const out: StepView[] = [];
  let from: number | undefined = 0;
  for (let pages = 0; from !== undefined; pages++) {
    if (pages > 100) throw new Error(`readSteps of "${id}" never ended`);
    const page = await e.readSteps(id, { from, limit });
    out.push(...page.steps);
    from = page.next;
  }
  return out;
}

describe.each(BACKENDS)("journal pages against the whole history (%s)", (backend) => {
  const harness = useHarness(backend);

  it("lists the calls of two generations at one seq in the same order as getSteps", async () => {
    // Generation 0: "m-fragile" fails at seq 1, its handler "zz-handler" runs at seq 2 and
    // the run fails. Generation 1: "m-fragile" succeeds and "aa-next" is called at seq 2.
    // SQLite's whole journal came in (seq, generation) order, its pages in (seq, key).
    const h = harness();
    let broken = true;
    const wf = workflow({ name: "two-generations", version: "1" }, async (ctx) => {
      await ctx.step("first", () => 1);
      try {
        await ctx.step("m-fragile", () => {
          if (broken) throw new FatalError("down");
          return 2;
        });
      } catch (err) {
        await ctx.step("zz-handler", () => 3);
        throw err;
      }
      await ctx.step("aa-next", () => 4);
      return "ok";
    });
    const e = h.engine([wf]);
    await expect((await e.start(wf, undefined, { id: "gens" })).result()).rejects.toThrow("down");
    broken = false;
    await expect((await e.resume("gens")).result()).resolves.toBe("ok");
    const whole = await e.getSteps("gens");
    expect(whole.map((s) => s.key)).toEqual(["first", "m-fragile", "aa-next", "zz-handler"]);
    for (const limit of [1, 2, 500]) expect(await allPages(e, "gens", limit)).toEqual(whole);
  });
});
