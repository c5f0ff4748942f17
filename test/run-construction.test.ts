// What one execution of a run costs to set up, counted (not timed): the maps and sets a
// Context makes for a run created now, and the ctx's methods, which are bound to the
// execution when first read rather than made as a score of closures a run.

import { afterEach, describe, expect, it } from "vitest";
import type { RunWrite } from "../src/store/store.js";
import { Context, type Outcome } from "../src/workflow/context.js";
import type { WorkflowContext } from "../src/workflow/context-types.js";
import { emptyJournal, testContextHost } from "./helpers/context-host.js";

const host = (writes: RunWrite[] = []) => testContextHost(writes);

const made: Context[] = [];
afterEach(() => {
  // A Context counts the workflow's late work until it stops.
  for (const c of made.splice(0)) c.stopWithoutWriting();
});

/** How many Maps, Sets, WeakMaps and WeakSets `fn` constructs (synchronously). */
function collectionsMadeBy<T>(fn: () => T): { value: T; count: number } {
  const g = globalThis as Record<string, unknown>;
  const names = ["Map", "Set", "WeakMap", "WeakSet"] as const;
  const originals = names.map((n) => g[n] as new (...a: unknown[]) => object);
  let count = 0;
  names.forEach((n, i) => {
    const Original = originals[i]!;
    g[n] = new Proxy(Original, {
      construct(target, args, newTarget) {
        count++;
        return Reflect.construct(target, args, newTarget === g[n] ? target : newTarget);
      },
    });
  });
  try {
    return { value: fn(), count };
  } finally {
    names.forEach((n, i) => {
      g[n] = originals[i];
    });
  }
}

describe("a run's setup, counted", () => {
  it("a Context for a run created now makes a handful of maps and sets, not a score", () => {
    made.push(new Context(host(), emptyJournal())); // the shared empty index is made once
    const h = host();
    const journal = emptyJournal();
    const { value: ctx, count } = collectionsMadeBy(() => new Context(h, journal));
    made.push(ctx);
    // 29 before: a dozen of the Context's own, eight of its journal index's, the call kinds',
    // the budget's and crash charges' (most runs use none). Two now: the delivery queue's
    // and the late-call check's, which every step uses.
    expect(count).toBeLessThanOrEqual(3);
  });

  it("every execution of an empty journal shares one index, which refuses changes", () => {
    const a = new Context(host(), emptyJournal());
    const b = new Context({ ...host(), generation: 3 }, emptyJournal());
    made.push(a, b);
    expect(a.journal).toBe(b.journal);
    expect(() => a.journal.outcomes.set("k", undefined as never)).toThrow(/shared index/);
    expect(() => a.journal.freeKeys.add("k")).toThrow(/shared index/);
    expect(() => a.journal.orderedPositions.push(1)).toThrow();
    expect(a.journal.outcomes.size).toBe(0);
  });

  it("the ctx holds no closures of its own: its methods are bound when first read, once", () => {
    const ctx = new Context(host(), emptyJournal());
    made.push(ctx);
    const api = ctx.api as unknown as Record<string | symbol, unknown>;
    // Its methods are own accessors (a spread copies them), each the prototype's getter.
    const proto = Object.getPrototypeOf(api) as object;
    const own = Reflect.ownKeys(api).filter((k) => {
      const d = Object.getOwnPropertyDescriptor(api, k);
      if (typeof d?.value === "function") return true;
      return d?.get !== undefined && d.get !== Object.getOwnPropertyDescriptor(proto, k)?.get;
    });
    expect(own).toEqual([]);
    expect(ctx.api.step).toBe(ctx.api.step);
    expect(ctx.api.now).toBe(ctx.api.now);
    expect(Object.keys(ctx.api)).toEqual([
      "runId",
      "workflow",
      "version",
      "signal",
      "budget",
      "step",
      "effect",
      "sleep",
      "sleepUntil",
      "waitForEvent",
      "child",
      "workspace",
      "approval",
      "now",
      "random",
      "uuid",
    ]);
  });

  it("a workflow that destructures the ctx, or replaces a method, runs as with closures", async () => {
    const writes: RunWrite[] = [];
    const ctx = new Context(host(writes), emptyJournal());
    made.push(ctx);
    const seen: string[] = [];
    const outcome: Outcome = await ctx.start(async (c: WorkflowContext) => {
      const { step, now, runId, signal } = c;
      const real = c.step;
      c.step = ((name: string, fn: () => unknown) => {
        seen.push(name);
        return real(name, fn);
      }) as WorkflowContext["step"];
      const a = await step("a", () => 1);
      const b = await c.step("b", () => 2);
      c.step = real;
      return { a, b, at: now() >= 0, runId, aborted: signal.aborted };
    }, undefined);
    expect(outcome).toEqual({
      kind: "completed",
      output: { a: 1, b: 2, at: true, runId: "r", aborted: false },
    });
    expect(seen).toEqual(["b"]);
    expect(writes.flatMap((w) => (w.steps ?? []).map((s) => s.key))).toEqual(["a", "b", "@now"]);
  });
});
