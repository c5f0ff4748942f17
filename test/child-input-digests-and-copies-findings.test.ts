// Findings on a child's input copied when the call is made: one object handed to many
// calls is kept once.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";

const harness = useHarness("sqlite");

describe("one object handed unchanged to many child calls", () => {
  it("is copied once, not once per call (each copy was held until its call's turn)", async () => {
    const h = harness();
    const seen: unknown[] = [];
    const schema = {
      "~standard": {
        version: 1 as const,
        vendor: "findings",
        validate: (value: unknown) => {
          seen.push(value);
          return { value: value as { rows: string[] } };
        },
      },
    };
    const kid = workflow(
      { name: "dig-shared-kid", version: "1", input: schema },
      async (_ctx, i: { rows: string[] }) => i.rows.length,
    );
    const parent = workflow({ name: "dig-shared-parent", version: "1" }, async (ctx) => {
      const shared = { rows: ["a", "b", "c"] };
      const kids = [0, 1, 2, 3].map((i) => ctx.child(`kid:${i}`, kid, shared));
      // Changed after: the next call copies it anew, the earlier ones keep theirs.
      shared.rows = ["d"];
      kids.push(ctx.child("kid:4", kid, shared));
      return Promise.all(kids);
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "ps" });
    expect(await run.result()).toEqual([3, 3, 3, 3, 1]);
    expect(seen).toHaveLength(5);
    // Held once (its stored text) until the calls' turns; each turn decodes a copy of its
    // own, so what one child's schema does to it in place reaches no other.
    for (const v of seen.slice(1, 4)) expect(v).toEqual(seen[0]);
    expect(seen[4]).not.toBe(seen[0]);
    expect(seen[0]).toEqual({ rows: ["a", "b", "c"] });
  });
});
