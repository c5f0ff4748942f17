// A run failed by Promise.any (every branch failed: an AggregateError) is repaired by resume
// like a run failed by one call: every call whose error the AggregateError holds executes
// again, so a branch that works now lets the run complete.

import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

describe.each(BACKENDS)("resume of a run Promise.any failed on %s", (backend) => {
  const harness = useHarness(backend);

  it("executes again every call whose error failed the run", async () => {
    const h = harness();
    const ran: string[] = [];
    const broken = new Set(["a", "b"]);
    const provider = (name: string) => () => {
      ran.push(name);
      if (broken.has(name)) throw new FatalError(`${name} is down`);
      return name;
    };
    const wf = workflow({ name: "first-of", version: "1" }, async (ctx) => {
      const first = await ctx.step("plan", () => "p");
      const answer = await Promise.any([
        ctx.step("a", provider("a")),
        ctx.step("b", provider("b")),
      ]);
      return `${first}:${answer}`;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined, { id: "any" });
    await expect(run.result()).rejects.toMatchObject({ name: "AggregateError" });
    expect([...ran].sort()).toEqual(["a", "b"]);

    // Only b is mended: a fails again, b answers, and Promise.any takes b.
    broken.delete("b");
    ran.length = 0;
    await engine.resume("any");
    expect(await engine.handle("any").result()).toBe("p:b");
    expect([...ran].sort()).toEqual(["a", "b"]);
  });

  it("keeps a caught Promise.any failure replayed, not executed again", async () => {
    const h = harness();
    const ran: string[] = [];
    let brokenAfter = true;
    const wf = workflow({ name: "any-caught", version: "1" }, async (ctx) => {
      const got = await Promise.any([
        ctx.step("x", () => {
          ran.push("x");
          throw new FatalError("x is down");
        }),
        ctx.step("y", () => {
          ran.push("y");
          throw new FatalError("y is down");
        }),
      ]).catch(() => "fallback");
      await ctx.step("after", () => {
        ran.push("after");
        if (brokenAfter) throw new FatalError("after is broken");
        return 1;
      });
      return got;
    });
    const engine = h.engine([wf]);
    await expect((await engine.start(wf, undefined, { id: "caught" })).result()).rejects.toThrow(
      "after is broken",
    );
    brokenAfter = false;
    ran.length = 0;
    await engine.resume("caught");
    expect(await engine.handle("caught").result()).toBe("fallback");
    expect(ran).toEqual(["after"]);
  });

  it("names a call once however often an AggregateError holds it, even itself, at every level", async () => {
    const h = harness();
    let broken = true;
    const wf = workflow({ name: "tangled", version: "1" }, async (ctx) => {
      try {
        await ctx.step("flaky", () => {
          if (broken) throw new FatalError("flaky is down");
          return "ok";
        });
      } catch (err) {
        // 200 references at each of 8 levels: 200^8 visits without a memory of the seen.
        const tangled = new AggregateError([], "gave up");
        tangled.errors.push(...Array.from({ length: 200 }, () => tangled), err);
        throw tangled;
      }
      return "done";
    });
    const engine = h.engine([wf]);
    await expect((await engine.start(wf, undefined, { id: "tangled" })).result()).rejects.toThrow(
      "gave up",
    );
    broken = false;
    await engine.resume("tangled");
    expect(await engine.handle("tangled").result()).toBe("done");
  });
});
