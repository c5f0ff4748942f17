// engine.approve / engine.reject handed options that are not `{ by?, comment?, answer?, via? }`
// answered all the same, dropping what the caller meant: `reject(id, "merge", "needs
// tests")` (a comment passed as the options) rejected with no comment, and `{ comments }`
// or `{ bye }` (a misspelt option) approved as "engine". A `by` that was no string said
// "must be 1-200 characters" of a number. Each is now a TypeError naming the call, and
// nothing is answered: the approval stays pending for the right answer.
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";

const wf = workflow({ name: "approve-options", version: "1" }, async (ctx) => {
  const d = await ctx.approval("merge", { request: { title: "t" } });
  return { decision: d.decision, by: d.by, comment: d.comment };
});

describe("engine.approve / reject options", () => {
  it("a string, an unknown option, or a by that is no string is refused, and nothing is answered", async () => {
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined, { id: "asks" });
    await t.advanceUntilStatus(run, "waiting");
    const e = t.engine as unknown as {
      approve(id: string, name: string, o: unknown): Promise<unknown>;
      reject(id: string, name: string, o: unknown): Promise<unknown>;
    };

    await expect(e.reject("asks", "merge", "needs tests")).rejects.toThrow(
      new TypeError(
        'engine.reject("asks", "merge", options): options must be an object { by?, comment?, answer?, via? }, got a string (for a comment, pass { comment: "needs tests" }); nothing was answered',
      ),
    );
    await expect(e.approve("asks", "merge", { by: "ann", comments: "ok", bye: 1 })).rejects.toThrow(
      new TypeError(
        'engine.approve("asks", "merge", options): unknown options "comments", "bye"; the options are by, comment, answer, via; nothing was answered',
      ),
    );
    await expect(e.approve("asks", "merge", null)).rejects.toThrow(
      /options must be an object .*, got null;/,
    );
    await expect(e.approve("asks", "merge", { by: 5 })).rejects.toThrow(
      new TypeError("The approver (by) must be a string of 1-200 characters, got number"),
    );

    const [pending] = await t.engine.listApprovals("asks");
    expect(pending?.status).toBe("pending");

    // The right call answers.
    await t.engine.reject("asks", "merge", { by: "ann", comment: "needs tests" });
    const done = await t.settle(run);
    expect(done.output).toEqual({ decision: "rejected", by: "ann", comment: "needs tests" });
  });

  it("no options, or options left undefined, still answer as the engine", async () => {
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined, { id: "asks-2" });
    await t.advanceUntilStatus(run, "waiting");
    await t.engine.approve("asks-2", "merge", { comment: undefined });
    expect((await t.settle(run)).output).toEqual({ decision: "approved", by: "engine" });
  });
});
