// Child run ids must not be shared between parents. With ids "parent:key", parent "a:b"
// with child "c" and parent "a" with child "b:c" made the same child id, and the second
// parent adopted the first one's child and its result. Now a taken id whose run has
// another parent (or none) is refused with RunConflictError naming both parents; and
// childRunId (src/lib/ids.ts) gives ids that cannot clash between parents at all.

import { describe, expect, it } from "vitest";
import { RunConflictError, workflow } from "../src/index.js";
import { childRunId } from "../src/lib/ids.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { within } from "./helpers/within.js";

const kid = workflow({ name: "kid", version: "1" }, async (ctx, n: number) =>
  ctx.step("work", () => n),
);
const parent = workflow(
  { name: "parent", version: "1" },
  async (ctx, input: { name: string; n: number }) => ctx.child(input.name, kid, input.n),
);

/** The child ids a parent's ctx.child may use for `key`: the replay core's scheme as it
 *  was ("parent:key") and as it becomes (childRunId). */
const candidateChildIds = (parentId: string, key: string) => [
  `${parentId}:${key}`,
  childRunId(parentId, key),
];

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a parent never adopts another parent's child", async () => {
    const h = harness();
    const e = h.engine([parent, kid]);
    const first = await e.start(parent, { name: "c", n: 1 }, { id: "a:b" });
    expect(await within(first.result(), 30_000, "the first parent")).toBe(1);
    const second = await e.start(parent, { name: "b:c", n: 2 }, { id: "a" });
    const out = await within(second.result(), 30_000, "the second parent").catch((x: unknown) => x);
    if (out instanceof RunConflictError) {
      // Ids "parent:key": the id was taken; refused, naming both parents and the id.
      expect(out.message).toContain('Run "a" cannot start child run "a:b:c"');
      expect(out.message).toContain('a child of run "a:b"');
    } else {
      // Ids from childRunId: no clash at all; the child is its own.
      expect(out).toBe(2);
    }
    expect((await e.listRuns({ parentId: "a:b" })).map((r) => r.id)).toHaveLength(1);
  });

  it("a child id taken by a run started on its own is refused, not adopted", async () => {
    const h = harness();
    const e = h.engine([parent, kid]);
    for (const id of candidateChildIds("p", "kid")) {
      expect(await within((await e.start(kid, 7, { id })).result(), 30_000, id)).toBe(7);
    }
    const run = await e.start(parent, { name: "kid", n: 3 }, { id: "p" });
    const err = await within(run.result(), 30_000, "the parent").catch((x: unknown) => x);
    expect(err).toBeInstanceOf(RunConflictError);
    expect((err as Error).message).toMatch(
      /^Run "p" cannot start child run "p[:/]kid": that id is already taken by a run started without a parent/,
    );
    expect(await e.listRuns({ parentId: "p" })).toEqual([]);
  });
});
