// Findings on the replay of child calls: a child call's recorded identity must
// match unchanged code on every replay, whatever path the replay takes.

import { runInThisContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { checkReplay, crashSweep } from "../src/testing/index.js";
import { useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const harness = useHarness("sqlite");

describe("a child's input digest on unchanged code", () => {
  it("an Error in a child's input replays after the same code is deployed at another path", async () => {
    const h = harness();
    const kid = workflow({ name: "cin-kid", version: "1" }, async (_ctx, i: { note: Error }) => {
      return i.note.message;
    });
    // The same source text, loaded from the directory of a release: a deploy moves it.
    const source = `(async (ctx, kid) => {
      const note = new Error("why");
      const got = await ctx.child("kid", kid, { note });
      await ctx.waitForEvent("go");
      return got;
    })`;
    const deployed = { at: "/srv/app/releases/1/workflows.js" };
    const parent = workflow({ name: "cin-parent", version: "1" }, async (ctx) =>
      runInThisContext(source, { filename: deployed.at })(ctx, kid),
    );
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "p" });
    await until(async () => (await e.getRun("p"))?.status === "waiting", "parent waiting");
    deployed.at = "/srv/app/releases/2/workflows.js";
    const [res] = await checkReplay({ store: h.store(), workflows: [parent, kid], runIds: ["p"] });
    expect(res?.detail ?? "").not.toContain("another input");
    expect(res?.verdict).not.toBe("diverged");
    await e.sendEvent("p", "go", null);
    expect(await run.result()).toBe("why");
  });

  it("a Uint8Array viewing part of a pooled Buffer replays: the bytes it does not show are not the input", async () => {
    const h = harness();
    const kid = workflow({ name: "cin-bytes-kid", version: "1" }, async (_ctx, b: Uint8Array) =>
      Buffer.from(b).toString(),
    );
    // The zero-copy idiom: a view of a small Buffer's bytes, which Node takes from a shared
    // pool holding whatever else the process made lately.
    const view = (text: string) => {
      const b = Buffer.from(text);
      return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    };
    const parent = workflow({ name: "cin-bytes-parent", version: "1" }, async (ctx) => {
      const got = await ctx.child("kid", kid, view("hello"));
      await ctx.waitForEvent("go");
      return got;
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "pb" });
    await until(async () => (await e.getRun("pb"))?.status === "waiting", "parent waiting");
    Buffer.from("other bytes the process made since");
    await e.sendEvent("pb", "go", null);
    expect(await run.result()).toBe("hello");
  });
});

describe("a child's input changed by the workflow after the call", () => {
  it("each child gets the input its call was handed (one request object filled anew in a loop)", async () => {
    const h = harness();
    const kid = workflow(
      { name: "cin-loop-kid", version: "1" },
      async (_ctx, i: { n: number }) => i.n,
    );
    const parent = workflow({ name: "cin-loop-parent", version: "1" }, async (ctx) => {
      const request = { n: 0 };
      const all: Promise<number>[] = [];
      for (let i = 0; i < 3; i++) {
        request.n = i;
        all.push(ctx.child(`kid:${i}`, kid, request));
      }
      return Promise.all(all);
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "pl" });
    expect(await run.result()).toEqual([0, 1, 2]);
    const inputs = await Promise.all(
      [0, 1, 2].map(async (i) => (await e.getRun(`pl/kid:${i}`))?.input),
    );
    expect(inputs).toEqual([{ n: 0 }, { n: 1 }, { n: 2 }]);
  });
});

describe("an approval's request changed by the workflow after the call", () => {
  it("each asking stores the request its call was handed, not the object as changed later", async () => {
    const h = harness();
    const parent = workflow({ name: "cin-ask-loop", version: "1" }, async (ctx) => {
      const request = { item: "" };
      const asks: Promise<unknown>[] = [];
      for (const item of ["refund-a", "refund-b"]) {
        request.item = item;
        asks.push(ctx.approval(`ok:${item}`, { request }));
      }
      return Promise.all(asks);
    });
    const e = h.engine([parent]);
    await e.start(parent, undefined, { id: "pa" });
    await until(async () => (await e.getRun("pa"))?.status === "waiting", "asking");
    const asked = await e.listApprovals("pa");
    expect(asked.map((a) => [a.key, a.request])).toEqual([
      ["ok:refund-a", { item: "refund-a" }],
      ["ok:refund-b", { item: "refund-b" }],
    ]);
  });
});

describe("a crash at every boundary of calls handed objects the workflow changes after", () => {
  it("ends as the undisturbed run: each child and asking keeps what its call was handed", async () => {
    const kid = workflow(
      { name: "cin-sweep-kid", version: "1" },
      async (_ctx, i: { n: number; e: Error }) => `${i.n}:${i.e.message}`,
    );
    const parent = workflow({ name: "cin-sweep-parent", version: "1" }, async (ctx) => {
      const request = { n: 0, e: new Error("note") };
      const kids: Promise<string>[] = [];
      for (let i = 0; i < 2; i++) {
        request.n = i;
        kids.push(ctx.child(`kid:${i}`, kid, request));
      }
      const ask = { item: "a" };
      const asked = ctx.approval("ok", { request: ask, timeout: "1h", onTimeout: "approve" });
      ask.item = "changed";
      return { kids: await Promise.all(kids), approved: (await asked).approved };
    });
    const res = await crashSweep({ workflows: [parent, kid], workflow: parent, input: undefined });
    expect(res.baseline.output).toEqual({ kids: ["0:note", "1:note"], approved: true });
    expect(res.failures).toEqual([]);
  }, 120_000);
});
