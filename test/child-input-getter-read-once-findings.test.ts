// a child's input given through a getter was read twice on the call that starts the
// child: once for the digest its intent records, once for the copy the child is handed. A
// getter answering anew each read handed the child its second answer under the digest of
// its first. It is now read once: the child gets the copy, and the digest is the copy's.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";

const harness = useHarness("sqlite");

describe("a child's input with a getter", () => {
  it("is read once when the call starts its child; the child gets what the digest counted", async () => {
    const h = harness();
    const firstRunReads: number[] = [];
    const kid = workflow(
      { name: "getter-kid", version: "1" },
      async (_ctx, i: { n: number }) => i.n,
    );
    let executions = 0;
    const parent = workflow({ name: "getter-parent", version: "1" }, async (ctx) => {
      const execution = ++executions;
      // A fresh object each execution, its getter counting its reads from 1.
      let reads = 0;
      const input = {
        get n() {
          reads++;
          if (execution === 1) firstRunReads.push(reads);
          return reads;
        },
      };
      Object.defineProperty(input, "n", { enumerable: true });
      return ctx.child("kid", kid, input);
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "g1" });
    // The parent is replayed when the child ends: its call matches the recorded digest.
    expect(await run.result()).toBe(1);
    expect(firstRunReads).toEqual([1]);
    expect((await e.getRun("g1/kid"))?.input).toEqual({ n: 1 });
  });
});
