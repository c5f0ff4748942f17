// Values the codec's newest paths write (plain data without devalue, ArrayWithProps,
// ErrorWithCycles), through the engine on each backend and an encrypted store: the first
// run and the replay are handed the same value, and one nested deeper than devalue can read
// back is refused when its step completes, never recorded.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { encryptedStore, sqliteStore, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { tempDbPath, until } from "./helpers/sqlite.js";
import { sameValue } from "./helpers/value-equality.js";

type Mixed = {
  deep: unknown;
  match: RegExpExecArray;
  looped: Error & { self?: unknown; match?: unknown };
  shared: { at: number[] };
  again: { at: number[] };
  zeros: number[];
  text: string;
};

function mixed(): Mixed {
  let deep: unknown = { end: -0 };
  for (let i = 0; i < 800; i++) deep = i % 2 ? [deep] : { d: deep };
  const match = /(?<k>\w+)=(?<v>\w*)/d.exec("x k=v") as RegExpExecArray;
  const looped = Object.assign(new Error("spawn"), { code: "ENOENT" }) as Mixed["looped"];
  looped.self = looped;
  looped.match = match;
  const shared = { at: [1, -0, 2] };
  return {
    deep,
    match,
    looped,
    shared,
    again: shared,
    zeros: [-0, 0, -0],
    text: "\ud800 \u0000 \u2028 < 😀",
  };
}

function depthOf(value: unknown): number {
  let n = 0;
  let v = value as Record<string, unknown> | unknown[];
  while (!("end" in v)) {
    v = Array.isArray(v) ? (v[0] as unknown[]) : (v.d as Record<string, unknown>);
    n++;
  }
  return n;
}

function wf(seen: unknown[]) {
  return workflow({ name: "codec-mixed", version: "1" }, async (ctx) => {
    const found = await ctx.step("mixed", () => mixed());
    seen.push(found);
    await ctx.sleep("nap", 1000);
    return found.match.groups?.v;
  });
}

function expectSameBothTimes(seen: unknown[]): void {
  expect(seen).toHaveLength(2);
  const [first, replayed] = seen as [Mixed, Mixed];
  expect(sameValue(first, replayed)).toBeUndefined();
  for (const got of [first, replayed]) {
    expect(got.again).toBe(got.shared);
    expect(got.looped.self).toBe(got.looped);
    expect(got.looped.match).toBe(got.match);
    expect(got.match.index).toBe(2);
    expect(got.match.indices?.groups?.k).toEqual([2, 3]);
    expect(Object.is(got.zeros[0], -0)).toBe(true);
    expect(got.text).toBe("\ud800 \u0000 \u2028 < 😀");
    expect(depthOf(got.deep)).toBe(800);
  }
}

describe.each(BACKENDS)("a step's mixed value, first run and replay (%s)", (backend) => {
  const harness = useHarness(backend);

  it("is handed over whole, the same both times", async () => {
    const h = harness();
    const seen: unknown[] = [];
    const w = wf(seen);
    const e = h.engine([w]);
    const run = await e.start(w, undefined, { id: "mixed" });
    await until(async () => (await e.getRun("mixed"))?.status === "waiting", "the run waits");
    expect(await advanceUntil(h.clock, run.result(), 1000, 100)).toBe("v");
    expectSameBothTimes(seen);
  });

  it("nested deeper than the decoder reads: the step fails naming it, nothing undecodable is recorded", async () => {
    const h = harness();
    const deep = workflow({ name: "codec-deep", version: "1" }, async (ctx) => {
      try {
        await ctx.step("deep", () => {
          let v: unknown = 1;
          for (let i = 0; i < 3000; i++) v = { a: v };
          return v;
        });
        return "recorded";
      } catch (err) {
        return (err as Error).message;
      }
    });
    const e = h.engine([deep]);
    await e.start(deep, undefined, { id: "deep" });
    // Before the mend the step was recorded and the run paused: its value did not decode.
    await until(async () => {
      const status = (await e.getRun("deep"))?.status;
      return status === "completed" || status === "paused" || status === "failed";
    }, "the run ends or pauses");
    const got = await e.getRun("deep");
    expect([got?.status, got?.reason]).toEqual(["completed", undefined]);
    expect(got?.output).toMatch(/nested this deeply/);
  });
});

describe("a step's mixed value on an encrypted store", () => {
  it("is handed over whole, the same both times", async () => {
    const db = tempDbPath();
    const clock = createVirtualClock();
    const keys = [{ id: "k1", key: randomBytes(32).toString("base64") }];
    const seen: unknown[] = [];
    const w = wf(seen);
    const { createEngine } = await import("../src/index.js");
    const e = createEngine({
      store: encryptedStore(sqliteStore(db.path), { keys }),
      workflows: [w],
      clock,
      pollIntervalMs: 10,
    });
    try {
      const run = await e.start(w, undefined, { id: "enc" });
      await until(async () => (await e.getRun("enc"))?.status === "waiting", "the run waits");
      expect(await advanceUntil(clock, run.result(), 1000, 100)).toBe("v");
      expectSameBothTimes(seen);
    } finally {
      await e.close();
      db.cleanup();
    }
  });
});
