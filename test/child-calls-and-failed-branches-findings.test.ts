// Found by a review of child runs and of what a replay checks: a child call's
// workflow and input checked against its journal (replay, checkReplay, fork), a begun call
// replaced by another kind, a parent's event limits, resumes of runs failed by Promise.any
// and Promise.all over many calls, a child's error and input refusals, hostile names.

import { describe, expect, it } from "vitest";
import { decode, encode } from "../src/codec/codec.js";
import { createEngine, FatalError, NonDeterminismError, workflow } from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { checkReplay, crashSweep } from "../src/testing/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const harness = useHarness("sqlite");

describe("a ctx.child call replayed against its journal", () => {
  const kidA = workflow({ name: "kid-a", version: "1" }, async (_ctx, n: number) => `a${n}`);
  const kidB = workflow({ name: "kid-b", version: "1" }, async (_ctx, n: number) => `b${n}`);

  async function recorded(code: { kid: typeof kidA; n: number }) {
    const h = harness();
    const parent = workflow({ name: "childish", version: "1" }, async (ctx) => {
      const got = await ctx.child("kid", code.kid, code.n);
      await ctx.waitForEvent("go");
      return got;
    });
    const e = h.engine([parent, kidA, kidB]);
    const run = await e.start(parent, undefined, { id: "p" });
    await until(async () => (await e.getRun("p"))?.status === "waiting", "parent waiting");
    return { h, e, run, parent };
  }

  it("fails with NonDeterminismError when the code now starts another workflow under the key", async () => {
    const code = { kid: kidA, n: 1 };
    const { e, run } = await recorded(code);
    code.kid = kidB;
    await e.sendEvent("p", "go", null);
    const err = await run.result().catch((x: unknown) => x);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toContain('"kid-a"');
    expect((err as Error).message).toContain('"kid-b"');
    expect((err as Error).message).toContain('key "kid"');
  });

  it("fails with NonDeterminismError when the code now hands the child another input", async () => {
    const code = { kid: kidA, n: 1 };
    const { e, run } = await recorded(code);
    code.n = 2;
    await e.sendEvent("p", "go", null);
    const err = await run.result().catch((x: unknown) => x);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toContain("input");
  });

  it("replays the same child call as recorded", async () => {
    const code = { kid: kidA, n: 1 };
    const { e, run } = await recorded(code);
    await e.sendEvent("p", "go", null);
    expect(await run.result()).toBe("a1");
  });

  it("checkReplay reports a child call whose workflow or input changed", async () => {
    const code = { kid: kidA, n: 1 };
    const { h, e } = await recorded(code);
    await e.close();
    const changed = workflow({ name: "childish", version: "1" }, async (ctx) => {
      const got = await ctx.child("kid", kidA, 7);
      await ctx.waitForEvent("go");
      return got;
    });
    const [res] = await checkReplay({ store: h.store(), workflows: [changed], runIds: ["p"] });
    expect(res?.verdict).toBe("diverged");
    expect(res?.detail).toContain('key "kid"');
  });
});

describe("a call begun durably, not finished, replaced by another kind of call", () => {
  it("fails with NonDeterminismError: the child it started is not left running unawaited", async () => {
    const h = harness();
    const kid = workflow({ name: "begun-kid", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1h");
      return "kid";
    });
    const code = { asChild: true };
    const parent = workflow({ name: "begun-parent", version: "1" }, async (ctx) =>
      code.asChild ? ctx.child("x", kid, undefined) : ctx.step("x", () => "step"),
    );
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "bp" });
    await until(async () => (await e.getRun("bp"))?.status === "waiting", "parent waiting");
    code.asChild = false;
    // The child's end wakes the parent, which now calls a step at the child's key.
    await e.cancel("bp/x", "wake the parent");
    const err = (await run.result().catch((x: unknown) => x)) as Error;
    expect(err.name).toBe("NonDeterminismError");
    expect(err.message).toContain(
      'the journal recorded child "x" begun there, the code now calls step "x"',
    );
    expect((await e.getSteps("bp")).map((s) => [s.key, s.kind])).toEqual([["x", "child"]]);
  });
});

describe("intents recorded before cairn kept a child's identity", () => {
  it("are not compared: a run recorded by the previous version replays as before", async () => {
    const h = harness();
    const kid = workflow({ name: "old-kid", version: "1" }, async (_ctx, n: number) => n * 10);
    const code = { n: 1 };
    const parent = workflow({ name: "old-parent", version: "1" }, async (ctx) => {
      const got = await ctx.child("kid", kid, code.n);
      await ctx.waitForEvent("go");
      return got;
    });
    // The intent as the previous version wrote it: the child's id alone.
    const inner = h.store();
    const store = new Proxy(inner, {
      get(t, p) {
        if (p === "appendRecords") {
          return (writes: RunWrite[]) =>
            t.appendRecords(
              writes.map((w) => ({
                ...w,
                intents: w.intents?.map((i) =>
                  i.kind === "child"
                    ? {
                        ...i,
                        data: encode({ childId: decode<{ childId: string }>(i.data).childId }),
                      }
                    : i,
                ),
              })),
            );
        }
        const v = Reflect.get(t, p, t);
        return typeof v === "function" ? v.bind(t) : v;
      },
    });
    const e = createEngine({ store, workflows: [parent, kid], clock: h.clock, pollIntervalMs: 10 });
    try {
      const run = await e.start(parent, undefined, { id: "old" });
      await until(async () => (await e.getRun("old"))?.status === "waiting", "parent waiting");
      code.n = 2;
      await e.sendEvent("old", "go", null);
      expect(await run.result()).toBe(10);
    } finally {
      await e.close();
    }
  });
});

describe.each(BACKENDS)("%s: a parent's children and its event limits", (backend) => {
  const h2 = useHarness(backend);

  it("children's results count toward no limit of the parent's: its own events are still taken", async () => {
    const h = h2();
    const kid = workflow({ name: "limit-kid", version: "1" }, async (_ctx, n: number) => n);
    const parent = workflow({ name: "limit-parent", version: "1" }, async (ctx) => {
      // The children finish while the parent sleeps: their results wait unconsumed.
      const kids = [1, 2, 3].map((n) => ctx.child(`kid:${n}`, kid, n));
      await ctx.sleep("nap", "1h");
      const got = await Promise.all(kids);
      const go = await ctx.waitForEvent<number>("go");
      return [...got, go.timedOut ? null : go.payload];
    });
    const e = h.engine([parent, kid], {
      limits: { maxEventsPerRun: 3, maxPendingEventsPerRun: 2 },
    });
    const run = await e.start(parent, undefined, { id: "lp" });
    await until(
      async () =>
        (await e.listRuns({ workflow: "limit-kid" })).every((r) => r.status === "completed") &&
        (await e.listRuns({ workflow: "limit-kid" })).length === 3,
      "children completed",
    );
    // Three child results wait unconsumed: the parent's own event is taken all the same.
    await e.sendEvent("lp", "early", 0);
    await h.clock.advance(3_600_000);
    await until(
      async () => (await e.getRun("lp"))?.waitingFor?.includes("go") === true,
      "waits for go",
    );
    await e.sendEvent("lp", "go", 4);
    expect(await run.result()).toEqual([1, 2, 3, 4]);
  });
});

describe.each(BACKENDS)(
  "%s: a resume of a run failed by Promise.any over more than 1,000 calls",
  (backend) => {
    const harness = useHarness(backend);

    it("executes again every call whose error failed the run, past the first 1,000", async () => {
      const h = harness();
      const N = 1_100;
      const ran = new Map<number, number>();
      // At first every branch fails; then only the last ones are mended.
      let mendedFrom = N;
      const wf = workflow({ name: "any-many", version: "1" }, async (ctx) => {
        const head = await ctx.step("head", () => "h");
        const answer = await Promise.any(
          Array.from({ length: N }, (_, i) =>
            ctx.step(`p:${i}`, () => {
              ran.set(i, (ran.get(i) ?? 0) + 1);
              if (i < mendedFrom) throw new FatalError(`p:${i} is down`);
              return i;
            }),
          ),
        );
        return `${head}:${answer}`;
      });
      const e = h.engine([wf], { limits: { maxStepsPerRun: 5_000 } });
      const run = await e.start(wf, undefined, { id: "anymany" });
      await expect(run.result()).rejects.toMatchObject({ name: "AggregateError" });
      expect(ran.size).toBe(N);
      mendedFrom = 1_050;
      ran.clear();
      await e.resume("anymany");
      const out = String(await e.handle("anymany").result());
      expect(out).toMatch(/^h:(\d+)$/);
      expect(Number(out.slice(2))).toBeGreaterThanOrEqual(1_050);
      // Exactly the failed calls executed again ("head" replayed its value), each once.
      expect(ran.size).toBe(N);
      expect([...ran.values()].every((n) => n === 1)).toBe(true);
    }, 120_000);
  },
);

describe("a resume of a run failed by Promise.all over more than 1,000 calls", () => {
  it("executes again the call that failed it and replays every other call's value", async () => {
    const h = harness();
    const N = 1_100;
    const ran = new Map<number, number>();
    let broken = true;
    const wf = workflow({ name: "all-many", version: "1" }, async (ctx) => {
      const got = await Promise.all(
        Array.from({ length: N }, (_, i) =>
          ctx.step(`q:${i}`, () => {
            ran.set(i, (ran.get(i) ?? 0) + 1);
            if (i === 1_077 && broken) throw new FatalError("q:1077 is down");
            return i * 2;
          }),
        ),
      );
      return got.reduce((a, b) => a + b, 0);
    });
    const e = h.engine([wf], { limits: { maxStepsPerRun: 5_000 } });
    const run = await e.start(wf, undefined, { id: "allmany" });
    await expect(run.result()).rejects.toThrow("q:1077 is down");
    broken = false;
    ran.clear();
    await e.resume("allmany");
    expect(await e.handle("allmany").result()).toBe(N * (N - 1));
    expect([...ran.entries()]).toEqual([[1_077, 1]]);
  }, 120_000);
});

describe("a resume of a run failed by Promise.all whose calls failed", () => {
  it("executes again every call that failed after the workflow had settled, in one resume", async () => {
    const h = harness();
    const N = 1_100;
    const failing = new Set(Array.from({ length: 30 }, (_, i) => 17 + i * 37));
    const ran = new Map<number, number>();
    let broken = true;
    const wf = workflow({ name: "all-failing", version: "1" }, async (ctx) => {
      const got = await Promise.all(
        Array.from({ length: N }, (_, i) =>
          ctx.step(`f:${i}`, () => {
            ran.set(i, (ran.get(i) ?? 0) + 1);
            if (broken && failing.has(i)) throw new FatalError(`f:${i} is down`);
            return i;
          }),
        ),
      );
      return got.length;
    });
    const e = h.engine([wf], { limits: { maxStepsPerRun: 5_000 } });
    const run = await e.start(wf, undefined, { id: "allfailing" });
    await expect(run.result()).rejects.toThrow(/^f:\d+ is down$/);
    expect((await e.getSteps("allfailing")).filter((s) => s.status === "failed")).toHaveLength(30);
    broken = false;
    ran.clear();
    // One resume: the Promise.all rejected with one error, and no code could act on the
    // others' (they came once the function had failed): each of them executes again.
    await e.resume("allfailing");
    expect(await e.handle("allfailing").result()).toBe(N);
    expect([...ran.keys()].sort((a, b) => a - b)).toEqual([...failing]);
    expect([...ran.values()].every((n) => n === 1)).toBe(true);
  }, 120_000);

  it("names the same calls when the execution that failed was cut off before its release", async () => {
    const h = harness();
    const ran: string[] = [];
    let broken = true;
    const wf = workflow({ name: "all-failing-cut", version: "1" }, async (ctx) =>
      Promise.all(
        ["a", "b", "c"].map((k) =>
          ctx.step(k, () => {
            ran.push(k);
            if (broken) throw new FatalError(`${k} is down`);
            return k;
          }),
        ),
      ),
    );
    // The first release to failed does not land (a store error): the run is handed back and
    // a second execution replays the three recorded failures before it fails the run.
    let cut = false;
    const inner = h.store();
    const store = new Proxy(inner, {
      get(t, p) {
        if (p === "releaseRun") {
          return (r: { status: string }) => {
            if (r.status === "failed" && !cut) {
              cut = true;
              return Promise.reject(new Error("the connection dropped (injected)"));
            }
            return t.releaseRun(r as never);
          };
        }
        const v = Reflect.get(t, p, t);
        return typeof v === "function" ? v.bind(t) : v;
      },
    });
    const e = createEngine({ store, workflows: [wf], clock: h.clock, pollIntervalMs: 10 });
    try {
      const run = await e.start(wf, undefined, { id: "cutall" });
      await expect(run.result()).rejects.toThrow("a is down");
      expect(cut).toBe(true);
      expect(ran).toEqual(["a", "b", "c"]);
      broken = false;
      ran.length = 0;
      await e.resume("cutall");
      expect(await e.handle("cutall").result()).toEqual(["a", "b", "c"]);
      expect(ran.sort()).toEqual(["a", "b", "c"]);
    } finally {
      await e.close();
    }
  });

  it("replays a failure the workflow caught before it failed", async () => {
    const h = harness();
    const ran: string[] = [];
    let broken = true;
    const wf = workflow({ name: "caught-then-failed", version: "1" }, async (ctx) => {
      const first = await ctx
        .step("first", () => {
          ran.push("first");
          throw new FatalError("first is down");
        })
        .catch(() => "fallback");
      await ctx.step("second", () => {
        ran.push("second");
        if (broken) throw new FatalError("second is down");
      });
      return first;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "caught" });
    await expect(run.result()).rejects.toThrow("second is down");
    broken = false;
    ran.length = 0;
    await e.resume("caught");
    expect(await e.handle("caught").result()).toBe("fallback");
    expect(ran).toEqual(["second"]);
  });
});

describe("a call name of a megabyte", () => {
  it("fails the run with a message that quotes 300 characters of it, not the whole name", async () => {
    const h = harness();
    const kid = workflow({ name: "mb-kid", version: "1" }, async () => 1);
    const big = "x".repeat(1 << 20);
    const wf = workflow({ name: "mb-parent", version: "1" }, async (ctx) => ctx.child(big, kid, 1));
    const e = h.engine([wf, kid]);
    const run = await e.start(wf, undefined, { id: "mb" });
    const err = (await run.result().catch((x: unknown) => x)) as Error;
    expect(err.name).toBe("TypeError");
    expect(err.message).toContain(
      `ctx.child("${"x".repeat(300)}"… (1048576 characters)) in run "mb"`,
    );
    expect(err.message.length).toBeLessThan(1_000);
    const stored = await e.getRun("mb");
    expect(stored?.error?.message.length).toBeLessThan(1_000);
  });

  it("a workspace name or an event name of a megabyte is quoted to 300 characters too", async () => {
    const h = harness();
    const big = "y".repeat(1 << 20);
    const wf = workflow({ name: "mb-workspace", version: "1" }, async (ctx) => {
      await ctx.workspace(big);
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "mbw" });
    const err = (await run.result().catch((x: unknown) => x)) as Error;
    expect(err.message).toContain(`ctx.workspace("${"y".repeat(300)}"… (1048576 characters))`);
    expect(err.message.length).toBeLessThan(1_000);
    const sent = (await e.sendEvent("mbw", big, null).catch((x: unknown) => x)) as Error;
    expect(sent.message.length).toBeLessThan(1_000);
  });
});

describe.each(BACKENDS)("%s: a fork of a parent that has children", (backend) => {
  const h3 = useHarness(backend);

  it("checks a reused child call as a replay does; a fork from the child call starts its own child", async () => {
    const h = h3();
    const kid = workflow({ name: "fork-kid", version: "1" }, async (_ctx, n: number) => `kid${n}`);
    const code = { n: 1, broken: true };
    const parent = workflow({ name: "fork-parent", version: "1" }, async (ctx) => {
      const got = await ctx.child("kid", kid, code.n);
      await ctx.step("after", () => {
        if (code.broken) throw new FatalError("after is broken");
      });
      return got;
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "src" });
    await expect(run.result()).rejects.toThrow("after is broken");
    code.broken = false;
    // The same code: the fork reuses the source's child's result.
    expect(await (await e.fork("src", { fromStep: "after", id: "same" })).result()).toBe("kid1");
    // Code that hands the child another input cannot reuse that result.
    code.n = 2;
    const changed = await e.fork("src", { fromStep: "after", id: "changed" });
    const err = await changed.result().catch((x: unknown) => x);
    expect((err as Error).name).toBe("NonDeterminismError");
    expect((err as Error).message).toContain('key "kid"');
    // A fork from the child call itself starts a child of its own with the new input.
    expect(await (await e.fork("src", { fromStep: "kid", id: "anew" })).result()).toBe("kid2");
    expect((await e.getRun("anew/kid"))?.status).toBe("completed");
  });
});

describe("a crash at every boundary of a tree of child runs", () => {
  it("ends as the undisturbed run: hostile strings, a grandchild, a caught failure, a race against a deadline", async () => {
    const HOSTILE = "\u0000a\ud800b\udc00c";
    const grand = workflow({ name: "sweep-grand", version: "1" }, async (ctx, s: string) =>
      ctx.step("g", () => `${s}!`),
    );
    const kid = workflow({ name: "sweep-kid", version: "1" }, async (ctx, s: string) => ({
      g: await ctx.child("grand", grand, s),
      s,
    }));
    const failing = workflow({ name: "sweep-failing", version: "1" }, async (ctx) => {
      await ctx.step("x", () => 1);
      throw new FatalError(`kid broke ${HOSTILE}`);
    });
    const slow = workflow({ name: "sweep-slow", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1h");
      return "slow";
    });
    const parent = workflow({ name: "sweep-parent", version: "1" }, async (ctx, s: string) => {
      const a = await ctx.child("kid", kid, s);
      const caught = await ctx
        .child("failing", failing, undefined)
        .catch((e: unknown) => (e as Error).message);
      const race = await Promise.race([
        ctx.child("slow", slow, undefined),
        ctx.sleep("deadline", "1s").then(() => "deadline"),
      ]);
      const both = await Promise.all([ctx.child("k2", kid, "x"), ctx.child("k3", kid, "y")]);
      return { a, caught, race, both };
    });
    const res = await crashSweep({
      workflows: [parent, kid, grand, failing, slow],
      workflow: parent,
      input: HOSTILE,
    });
    expect(res.baseline.output).toEqual({
      a: { g: `${HOSTILE}!`, s: HOSTILE },
      caught: `kid broke ${HOSTILE}`,
      race: "deadline",
      both: [
        { g: "x!", s: "x" },
        { g: "y!", s: "y" },
      ],
    });
    expect(res.boundaries.filter((b) => b.boundary.kind === "child").length).toBeGreaterThan(0);
    expect(res.failures).toEqual([]);
  }, 120_000);
});

describe("a child's error too big for an event", () => {
  it("reaches its parent as the same SerializationError when the parent reads it from the child's run", async () => {
    const h = harness();
    const limit = 1_000;
    const kid = workflow({ name: "big-error-kid", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1m");
      throw new FatalError("z".repeat(2 * limit));
    });
    let broken = true;
    const parent = workflow({ name: "big-error-parent", version: "1" }, async (ctx) => {
      const [got] = await Promise.all([
        ctx.child("kid", kid, undefined).catch((e: unknown) => (e as Error).name),
        ctx.step("other", () => {
          if (broken) throw new FatalError("other is broken");
        }),
      ]);
      return got;
    });
    const e = h.engine([parent, kid], { maxPayloadBytes: limit, abortGraceMs: 10 });
    const run = await e.start(parent, undefined, { id: "bep" });
    // The parent fails while its child sleeps: the child's end finds it failed, and its
    // result event is dropped; resumed, the parent reads the child's outcome from its run.
    await expect(run.result()).rejects.toThrow("other is broken");
    await h.clock.advance(120_000);
    await until(async () => (await e.getRun("bep/kid"))?.status === "failed", "child failed");
    broken = false;
    await e.resume("bep");
    expect(await e.handle("bep").result()).toBe("SerializationError");
  });
});

describe("a child whose input schema's validator throws", () => {
  it("is refused as its input is, once (the parent catches InputValidationError), not handed back for ever", async () => {
    const h = harness();
    let validations = 0;
    const schema = {
      "~standard": {
        version: 1 as const,
        vendor: "findings",
        validate: (): never => {
          validations++;
          throw new Error("validator bug");
        },
      },
    };
    const kid = workflow(
      { name: "throwing-schema-kid", version: "1", input: schema },
      async () => 1,
    );
    const parent = workflow({ name: "throwing-schema-parent", version: "1" }, async (ctx) =>
      ctx
        .child("kid", kid, undefined as never)
        .catch((e: unknown) => `${(e as Error).name}: ${(e as Error).message}`),
    );
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "tsp" });
    expect(await run.result()).toBe(
      'InputValidationError: Input for workflow "throwing-schema-kid@1" (run "tsp/kid") could not be checked: its input schema threw Error: validator bug. Nothing was recorded.',
    );
    expect(validations).toBe(1);
    expect(await e.getRun("tsp/kid")).toBeUndefined();
  });
});

describe.each(BACKENDS)(
  "%s: a child workflow object named as workflow() never names one",
  (backend) => {
    const h4 = useHarness(backend);

    it("is the call's TypeError (NUL, a lone surrogate, a megabyte), not a child nor an endless hand-back", async () => {
      const h = h4();
      const names = ["a\u0000b", "x\ud800", "n".repeat(1 << 20)];
      const parent = workflow(
        { name: "hostile-kid-parent", version: "1" },
        async (ctx, i: number) => {
          // Shaped like a workflow (another copy of cairn makes them so), but not one workflow() made.
          const fake = { name: names[i], version: "1", fn: async () => 1, options: {}, id: "x" };
          return ctx
            .child("kid", fake as never, 1)
            .catch((e: unknown) => `${(e as Error).name}: ${(e as Error).message}`);
        },
      );
      const e = h.engine([parent]);
      for (const i of [0, 1, 2]) {
        const run = await e.start(parent, i, { id: `hk${i}` });
        const out = String(await run.result());
        expect(out).toContain(
          `TypeError: ctx.child("kid") in run "hk${i}": the workflow handed in is named `,
        );
        expect(out).toContain("which workflow() refuses");
        expect(out.length).toBeLessThan(1_000);
        expect(await e.getRun(`hk${i}/kid`)).toBeUndefined();
      }
    });
  },
);
