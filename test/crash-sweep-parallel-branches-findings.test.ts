// crashSweep on a workflow with parallel branches whose order of finishing is timing. A
// boundary is found again by its key or, for keys an execution makes up anew (an AI SDK
// tool call's id), by its place among the boundaries crossed. The place was taken for any
// boundary of the same point and kind: when the other branch finished first in a crash
// execution, the sweep crashed at that branch's boundary instead of the one it aimed at. The
// aimed-at boundary was never tested (the same one twice instead), so a side effect repeated
// only there went unreported. Now a place stands in only for a key the undisturbed run never
// crossed.

import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { workflow } from "../src/index.js";
import { crashSweep, createSideEffectCounter } from "../src/testing/index.js";
import { mails, twoBranches } from "./fixtures/sweep-branches.js";
import { FIXTURES } from "./helpers/child.js";

const realWork = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("crashSweep with parallel branches that finish in another order", () => {
  it("crashes at each boundary it names, and reports the branch whose side effect repeats", async () => {
    const fx = createSideEffectCounter();
    let executions = 0;
    // The undisturbed execution: "safe" finishes last; every later one: "safe" finishes first.
    const safeLast = () => executions === 1;
    const wf = workflow({ name: "two-branches", version: "1" }, async (ctx) => {
      const [a, b] = await Promise.all([
        ctx.step("safe", async () => {
          await realWork(safeLast() ? 80 : 1);
          return 1;
        }),
        ctx.step("mail", async () => {
          await realWork(safeLast() ? 1 : 80);
          fx.record("mail"); // a plain step: sent again when a crash cuts it before its record
          return 2;
        }),
      ]);
      return a + b;
    });
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      sideEffects: fx,
      reset: () => {
        executions++;
      },
      filter: (b) => b.point === "before-record",
    });
    expect(res.boundaries.map((b) => [b.boundary.key, b.crashed])).toEqual([
      ["mail", true],
      ["safe", true],
    ]);
    expect(res.failures).toEqual([
      `crash after step "mail" returned, before its record (run "crash-sweep"): ` +
        `side effect "mail" happened 2 times (undisturbed: 1)`,
    ]);
  });

  it('with crash: "process" too: the child crashes at the boundary named, not at its place', async () => {
    const world = mkdtempSync(join(tmpdir(), "cairn-sweep-branches-"));
    onTestFinished(() => rmSync(world, { recursive: true, force: true }));
    let executions = 0;
    const res = await crashSweep({
      crash: "process",
      module: join(FIXTURES, "sweep-branches.ts"),
      workflows: [twoBranches],
      workflow: twoBranches,
      input: undefined,
      sideEffects: mails,
      env: { SWEEP_WORLD: world },
      reset: () => {
        for (const f of readdirSync(world)) rmSync(join(world, f));
        if (++executions === 1) writeFileSync(join(world, "safe-last"), "");
      },
      filter: (b) => b.point === "before-record",
    });
    expect(res.boundaries.map((b) => [b.boundary.key, b.crashed])).toEqual([
      ["mail", true],
      ["safe", true],
    ]);
    expect(res.failures).toEqual([
      `crash after step "mail" returned, before its record (run "crash-sweep"): ` +
        `side effect "mail" happened 2 times (undisturbed: 1)`,
    ]);
  });
});
