// A refused ctx.waitForEvent call names the method the workflow called: its messages said
// "ctx.wait(...)" (the record's kind), a method the ctx does not have.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";

describe("a refused waitForEvent names ctx.waitForEvent", () => {
  const harness = useHarness("sqlite");

  it.each([
    ["go#2", 'ctx.waitForEvent("go#2") in run'],
    ["a\u0000b", "ctx.waitForEvent() name in run"],
  ])("name %j", async (name, said) => {
    const h = harness();
    const wf = workflow({ name: "bad-wait", version: "1" }, async (ctx) => {
      await ctx.waitForEvent(name);
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    const err = await run.result().then(
      () => undefined,
      (x: Error) => x,
    );
    expect(err?.message).toContain(said);
    expect(err?.message).not.toContain("ctx.wait(");
  });
});
