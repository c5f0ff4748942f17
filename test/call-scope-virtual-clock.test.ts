// Under the test engine's virtual clock (cairn/testing), with call-scope.ts's hook
// turned off before each execution begins (as a second idle does): parallel branches wake
// from ctx.sleep and make reused-name calls from timer and immediate callbacks, a crash
// forces a replay on a new engine, and every branch's calls keep their own results.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";
import { scopeHook } from "../src/workflow/call-scope.js";

const hookOff = () =>
  new Promise<void>((r) =>
    setTimeout(() => {
      scopeHook.disable();
      r();
    }, 0),
  );

describe("call scope under the virtual clock", () => {
  it("branches that sleep, then reuse their names from timer and immediate callbacks, replay after a crash to the same result", async () => {
    const bodies: string[] = [];
    let crashNow = () => {};
    let first = true;
    const wf = workflow({ name: "vclock-fan", version: "1" }, async (ctx) => {
      const out = await Promise.all(
        ["p", "q", "r"].map(async (b, i) => {
          const x = await ctx.step(`s-${b}`, () => `${b}1`);
          await ctx.sleep(`nap-${b}`, 1_000 * (3 - i));
          const y = await new Promise((res) =>
            setTimeout(() => res(ctx.step(`s-${b}`, () => `${b}2`)), 1),
          );
          const z = await new Promise((res) =>
            setImmediate(() => res(ctx.step(`s-${b}`, () => `${b}3`))),
          );
          if (first && b === "p") {
            first = false;
            crashNow();
            await new Promise(() => {});
          }
          return ctx.step(`t-${b}`, () => {
            bodies.push(b);
            return `${x}/${y}/${z}`;
          });
        }),
      );
      return out;
    });
    const t = await createTestEngine({ workflows: [wf] });
    crashNow = () => t.crash();
    try {
      await hookOff();
      const run = await t.start(wf, undefined);
      await t.advanceUntil(() => t.crashed, "the first engine crashes");
      await hookOff();
      await t.recover();
      const view = await t.settle(run.id);
      expect(view.status).toBe("completed");
      expect(view.output).toEqual(["p1/p2/p3", "q1/q2/q3", "r1/r2/r3"]);
    } finally {
      await t.close();
    }
  });
});
