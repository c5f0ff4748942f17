// ctx.sleepUntil's refusals name ctx.sleepUntil. It makes a call of kind "sleep" (its record
// is a sleep's), and the call preamble (context.ts beginCall) named the method by the kind:
// a name too long, a name holding a NUL, a call inside a step's body, a call on another
// run's ctx were all told as `ctx.sleep(...)`, a method the workflow never called. Its own
// argument checks (a Date, its range) named it already; they are kept here beside the rest.
// The ctx does not depend on the backend: SQLite only.

import { describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe("ctx.sleepUntil's refusals name ctx.sleepUntil", () => {
  const harness = useHarness("sqlite");

  it("a name the rules refuse, its argument, and a call inside a step's body", async () => {
    const h = harness();
    const long = "n".repeat(201);
    const calls: Record<string, (ctx: WorkflowContext) => Promise<unknown>> = {
      long: (ctx) => ctx.sleepUntil(long, 0),
      nul: (ctx) => ctx.sleepUntil("a\u0000b", 0),
      notDate: (ctx) => ctx.sleepUntil("d", "soon" as unknown as number),
      outOfRange: (ctx) => ctx.sleepUntil("r", 1e19),
    };
    const wf = workflow({ name: "sleep-until-refusals", version: "1" }, async (ctx, c: string) => {
      if (c === "inBody") {
        return ctx.step("outer", () => ctx.sleepUntil("inner", 0), { retry: { maxAttempts: 1 } });
      }
      return calls[c]!(ctx).then(
        () => "slept",
        (err: Error) => err.message,
      );
    });
    const e = h.engine([wf]);
    const said = async (c: string) => (await e.start(wf, c, { id: `su-${c}` })).result();
    expect(await said("long")).toBe(
      `ctx.sleepUntil(${JSON.stringify(long)}) in run "su-long": a name must be 1-200 characters, must not contain "#" and must not start with "@" or a space`,
    );
    expect(await said("nul")).toMatch(/^ctx\.sleepUntil\(/);
    expect(await said("nul")).not.toMatch(/ctx\.sleep\(/);
    expect(await said("notDate")).toBe('ctx.sleepUntil("d"): expected a Date or ms');
    expect(await said("outOfRange")).toMatch(
      /^ctx\.sleepUntil\("r"\): 10000000000000000000 ms is outside the range of a Date/,
    );
    const body = await e.start(wf, "inBody", { id: "su-body" });
    await expect(body.result()).rejects.toThrow(
      'ctx.sleepUntil("inner") was called inside the body of step "outer" of run "su-body"; calls do not nest',
    );
    // ctx.sleep's own refusals still name ctx.sleep.
    const plain = workflow({ name: "sleep-refusal", version: "1" }, async (ctx) =>
      ctx.sleep(long, "1s").then(
        () => "slept",
        (err: Error) => err.message,
      ),
    );
    const e2 = h.engine([plain]);
    expect(await (await e2.start(plain, undefined, { id: "s-long" })).result()).toMatch(
      /^ctx\.sleep\("n+"\) in run "s-long": a name must be 1-200 characters/,
    );
  });

  it("a call on another run's ctx", async () => {
    const h = harness();
    let keptA: WorkflowContext | undefined;
    let release: (() => void) | undefined;
    const slow = new Promise<void>((resolve) => {
      release = resolve;
    });
    const a = workflow({ name: "sleep-until-owner", version: "1" }, async (ctx) => {
      keptA = ctx;
      await ctx.step("slow", () => slow);
      return "a done";
    });
    const b = workflow({ name: "sleep-until-caller", version: "1" }, async () =>
      (keptA as WorkflowContext).sleepUntil("from-b", 0).then(
        () => "slept",
        (err: Error) => err.message,
      ),
    );
    const e = h.engine([a, b]);
    const ra = await e.start(a, undefined, { id: "run_a" });
    await until(async () => keptA !== undefined, "run a executes");
    const outB = await (await e.start(b, undefined, { id: "run_b" })).result();
    release?.();
    expect(await ra.result()).toBe("a done");
    expect(outB).toBe(
      'ctx.sleepUntil("from-b") of run "run_a" was called from the workflow code of run "run_b"; a ctx belongs to the run it was handed to: call the ctx of run "run_b"',
    );
  });
});
