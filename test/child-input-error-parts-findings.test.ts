// Findings on a child's input digest and sameStoredValue: an Error counted by its name,
// message and code only took two inputs whose Errors differ in `status` or `cause` for one,
// and a replay adopted a child's result computed from the other input. Digests of inputs
// with an Error now count its every part but the stack, marked so that a digest recorded
// before (by name, message and code) is still compared as it was taken.

import { createHash } from "node:crypto";
import { runInThisContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { encode, encodeIdentity } from "../src/codec/codec.js";
import { sameStoredValue } from "../src/codec/same-stored-value.js";
import { workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import {
  childInputDigest,
  childInputDigests,
  sameInputDigest,
} from "../src/workflow/child-identity.js";
import { useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const harness = useHarness("sqlite");

/** A digest as cairn took it before Errors counted by their parts. */
const olderDigest = (input: unknown) =>
  createHash("sha256").update(encodeIdentity(input, "byName")).digest("base64url");

const failed = (status: number, cause: string) =>
  Object.assign(new Error("upstream failed", { cause: new Error(cause) }), { status });

describe("a child's input digest counts an Error's every part but its stack", () => {
  it("an input without an Error has the digest cairn always took", () => {
    const input = { a: [1, "two", new Date(3)], m: new Map([["k", 1n]]) };
    expect(childInputDigest(input)).toBe(olderDigest(input));
  });

  it("Errors of another status or cause give another digest; a digest taken before still compares by name", () => {
    const a = childInputDigests({ e: failed(404, "a") });
    const b = childInputDigests({ e: failed(500, "b") });
    expect(a.input).not.toBe(b.input);
    // Recorded by an older cairn: compared as it was taken (name, message and code).
    const older = olderDigest({ e: failed(404, "a") });
    expect(sameInputDigest(older, a)).toBe(true);
    expect(sameInputDigest(older, b)).toBe(true);
    expect(sameInputDigest(a.input as string, b)).toBe(false);
    expect(sameInputDigest(a.input as string, a)).toBe(true);
  });

  it("an Error that leads back to itself has one digest wherever the code that made it runs", () => {
    const at = (file: string) =>
      runInThisContext(
        `(() => { const e = new Error("loop", { cause: new Error("c") }); e.error = e; e.status = 7; return { e }; })()`,
        { filename: file },
      );
    const one = childInputDigest(at("/srv/releases/1/a.js"));
    expect(one).toBeDefined();
    expect(childInputDigest(at("/srv/releases/2/a.js"))).toBe(one);
  });

  it("a replay whose child input's Error changed status is refused, not handed the old child's result", async () => {
    const h = harness();
    const kid = workflow({ name: "cie-kid", version: "1" }, async (_ctx, i: { e: Error }) => {
      return `kid saw ${(i.e as Error & { status: number }).status}`;
    });
    const now = { status: 404 };
    const parent = workflow({ name: "cie-parent", version: "1" }, async (ctx) => {
      const e = Object.assign(new Error("upstream failed"), { status: now.status });
      const got = await ctx.child("kid", kid, { e });
      await ctx.waitForEvent("go");
      return got;
    });
    const e = h.engine([parent, kid]);
    await e.start(parent, undefined, { id: "cie" });
    await until(async () => (await e.getRun("cie"))?.status === "waiting", "parent waiting");
    const same = await checkReplay({ store: h.store(), workflows: [parent, kid], runIds: ["cie"] });
    expect(same[0]?.verdict).not.toBe("diverged");
    now.status = 500;
    const [res] = await checkReplay({
      store: h.store(),
      workflows: [parent, kid],
      runIds: ["cie"],
    });
    expect(res?.verdict).toBe("diverged");
    expect(res?.detail ?? "").toContain("another input");
  });

  it("a replay of the same Error with a cause, made by code deployed at another path, is not refused", async () => {
    const h = harness();
    const kid = workflow({ name: "cie-cause-kid", version: "1" }, async (_ctx, i: { e: Error }) =>
      String((i.e.cause as Error).message),
    );
    const source = `(async (ctx, kid) => {
      const e = Object.assign(new Error("why", { cause: new Error("under") }), { status: 503 });
      const got = await ctx.child("kid", kid, { e });
      await ctx.waitForEvent("go");
      return got;
    })`;
    const deployed = { at: "/srv/app/releases/1/workflows.js" };
    const parent = workflow({ name: "cie-cause-parent", version: "1" }, async (ctx) =>
      runInThisContext(source, { filename: deployed.at })(ctx, kid),
    );
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "cic" });
    await until(async () => (await e.getRun("cic"))?.status === "waiting", "parent waiting");
    deployed.at = "/srv/app/releases/2/workflows.js";
    const [res] = await checkReplay({
      store: h.store(),
      workflows: [parent, kid],
      runIds: ["cic"],
    });
    expect(res?.detail ?? "").not.toContain("another input");
    expect(res?.verdict).not.toBe("diverged");
    await e.sendEvent("cic", "go", null);
    expect(await run.result()).toBe("under");
  });
});

describe("sameStoredValue counts an Error's parts where both sides have them", () => {
  it("Errors of another status or cause are not the same value", () => {
    expect(sameStoredValue(encode({ e: failed(404, "a") }), encode({ e: failed(500, "b") }))).toBe(
      false,
    );
    expect(sameStoredValue(encode({ e: failed(404, "a") }), encode({ e: failed(404, "a") }))).toBe(
      true,
    );
  });

  it("an Error stored without its parts (as before ErrorWithProps) is the same as one with them", () => {
    const plain = new Error("upstream failed");
    expect(sameStoredValue(encode({ e: plain }), encode({ e: failed(404, "a") }))).toBe(true);
    const other = new Error("another message");
    expect(sameStoredValue(encode({ e: other }), encode({ e: failed(404, "a") }))).toBe(false);
  });
});
