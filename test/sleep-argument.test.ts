// A new user's `ctx.sleep("1h")` (one argument, as Temporal's `sleep("1 hour")` takes):
// the run failed with `ctx.sleep("1h") duration: cannot parse undefined`, which reads as if
// "1h" could not be parsed. The error now says the name comes first and shows the call.
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";

describe("ctx.sleep without a duration", () => {
  it("fails the run with a TypeError naming the run and showing the two-argument call", async () => {
    const wf = workflow({ name: "sleep-one-arg", version: "1" }, async (ctx) => {
      await (ctx.sleep as (d: string) => Promise<void>)("1h");
      return "woke";
    });
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined, { id: "sleeper" });
    const done = await t.settle(run);
    expect(done.status).toBe("failed");
    expect(done.error?.name).toBe("TypeError");
    expect(done.error?.message).toBe(
      'ctx.sleep("1h") in run "sleeper": no duration given. ctx.sleep takes a name, then a duration: ctx.sleep("wait", "1h") (a name as for a step; the duration in milliseconds or a string like "30s", "10m", "2h")',
    );
  });

  it("a name that is no duration is shown with a duration after it", async () => {
    const wf = workflow({ name: "sleep-name-only", version: "1" }, async (ctx) => {
      await (ctx.sleep as (d: string) => Promise<void>)("cool-down");
      return "woke";
    });
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined, { id: "sleeper-2" });
    const done = await t.settle(run);
    expect(done.error?.message).toMatch(
      /^ctx\.sleep\("cool-down"\) in run "sleeper-2": no duration given\. ctx\.sleep takes a name, then a duration: ctx\.sleep\("cool-down", "1h"\)/,
    );
  });

  it("ctx.sleep(name, duration) still sleeps", async () => {
    const wf = workflow({ name: "sleep-two-args", version: "1" }, async (ctx) => {
      await ctx.sleep("wait", "1h");
      return "woke";
    });
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined);
    expect((await t.settle(run)).output).toBe("woke");
  });
});
