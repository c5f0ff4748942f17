// Findings on b26c60f (releases of runs no longer running) and 80e9162 (a child's
// input digested by encodeIdentity, copied when the call is made).

import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { decode, encode } from "../src/codec/codec.js";
import { type Store, workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import { useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const harness = useHarness("sqlite");

/** The store, its journal showing the child intent at `key` as a cairn before 80e9162
 *  recorded it: the digest of encode's text of the input. */
function recordedBefore80e9162(store: Store, key: string, input: unknown): Store {
  const legacy = createHash("sha256")
    .update(encode(input, Number.POSITIVE_INFINITY))
    .digest("base64url");
  return new Proxy(store, {
    get(target, prop) {
      if (prop === "loadJournal") {
        return async (runId: string) => {
          const j = await target.loadJournal(runId);
          return {
            ...j,
            intents: j.intents.map((i) =>
              i.key === key && i.kind === "child"
                ? { ...i, data: encode({ ...decode<object>(i.data), input: legacy }) }
                : i,
            ),
          };
        };
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

describe("a child intent recorded before 80e9162 (its digest of encode's text)", () => {
  it("replays on unchanged code when the input holds an Error and a view of part of a buffer", async () => {
    const h = harness();
    const kid = workflow(
      { name: "dig-legacy-kid", version: "1" },
      async (_ctx, i: { note: Error; bytes: Uint8Array }) =>
        `${i.note.message}:${Buffer.from(i.bytes).toString()}`,
    );
    // What the code hands, the same on every run (the stack of the same code on one host
    // is the same; a fixed buffer stands for the bytes around the view).
    const input = () => {
      const note = new Error("why");
      note.stack = "Error: why\n    at /srv/app/releases/1/workflows.js:2:20";
      const buffer = new Uint8Array(16).fill(120);
      buffer.set(Buffer.from("hello"), 4);
      return { note, bytes: new Uint8Array(buffer.buffer, 4, 5) };
    };
    const parent = workflow({ name: "dig-legacy-parent", version: "1" }, async (ctx) => {
      const got = await ctx.child("kid", kid, input());
      await ctx.waitForEvent("go");
      return got;
    });
    const e = h.engine([parent, kid]);
    await e.start(parent, undefined, { id: "p" });
    await until(async () => (await e.getRun("p"))?.status === "waiting", "parent waiting");
    const [res] = await checkReplay({
      store: recordedBefore80e9162(h.store(), "kid", input()),
      workflows: [parent, kid],
      runIds: ["p"],
    });
    expect(res?.detail ?? "").not.toContain("another input");
    expect(res?.verdict).not.toBe("diverged");
  });

  it("still diverges when the code now hands another input", async () => {
    const h = harness();
    const kid = workflow({ name: "dig-legacy-kid2", version: "1" }, async (_ctx, i: unknown) => i);
    let message = "why";
    const parent = workflow({ name: "dig-legacy-parent2", version: "1" }, async (ctx) => {
      const note = new Error(message);
      note.stack = "fixed";
      await ctx.child("kid", kid, { note });
      await ctx.waitForEvent("go");
    });
    const e = h.engine([parent, kid]);
    await e.start(parent, undefined, { id: "p2" });
    await until(async () => (await e.getRun("p2"))?.status === "waiting", "parent waiting");
    const recorded = new Error("why");
    recorded.stack = "fixed";
    message = "another";
    const [res] = await checkReplay({
      store: recordedBefore80e9162(h.store(), "kid", { note: recorded }),
      workflows: [parent, kid],
      runIds: ["p2"],
    });
    expect(res?.verdict).toBe("diverged");
    expect(res?.detail ?? "").toContain("another input");
  });
});

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
    // own, so what one child's schema does to it in place reaches no other (attack-h11).
    for (const v of seen.slice(1, 4)) expect(v).toEqual(seen[0]);
    expect(seen[4]).not.toBe(seen[0]);
    expect(seen[0]).toEqual({ rows: ["a", "b", "c"] });
  });
});
