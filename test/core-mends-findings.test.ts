// Found by an adversarial review of three changes: resume of a run Promise.any failed,
// an execution reading the store's clock, and children and forks across generations.

import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

/** The run as the store holds it (failedCalls included), read through a store of its own. */
async function readRun(h: Harness, id: string) {
  const store = h.store();
  await store.open({ clock: h.clock });
  try {
    return await store.getRun(id);
  } finally {
    await store.close();
  }
}

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("with a virtual clock ctx.now() is the clock's reading, also at a fraction of a millisecond", async () => {
    const h = harness();
    await h.clock.advance(0.5);
    const wf = workflow({ name: "virtual-now", version: "1" }, async (ctx) => {
      return ctx.now("at");
    });
    const e = h.engine([wf]);
    const at = h.clock.now();
    const run = await e.start(wf, undefined, { id: "vn" });
    // docs/ARCHITECTURE.md, Time: the shift is "0 on SQLite and with a virtual clock"
    // (PostgreSQL stamped the lease at the reading rounded, and that half millisecond was
    // taken for the store's clock being ahead).
    expect(await run.result()).toBe(at);
  });

  it("an AggregateError caused by a call's error names that call: a resume executes it again", async () => {
    const h = harness();
    let broken = true;
    const wf = workflow({ name: "caused-aggregate", version: "1" }, async (ctx) => {
      try {
        return await ctx.step("a", () => {
          if (broken) throw new FatalError("a is down");
          return "a";
        });
      } catch (err) {
        // A library's way of saying "gave up": the call's failure is the cause.
        throw new AggregateError([new Error("no fallback either")], "gave up", { cause: err });
      }
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "ca" });
    await expect(advanceUntil(h.clock, run.result(), 100)).rejects.toThrow("gave up");
    // docs/API.md, resume: "the call whose error failed the run executes again" (as for an
    // Error whose cause is the call's; the walk stopped at the AggregateError's own errors).
    expect((await readRun(h, "ca"))?.failedCalls.map((f) => f.key)).toEqual(["a"]);
    broken = false;
    await e.resume("ca");
    expect(await advanceUntil(h.clock, e.handle("ca").result(), 100)).toBe("a");
  });

  it("a fork from a call recorded after the failure that failed its source, whose handler made a call, completes as a resume does", async () => {
    const h = harness();
    let broken = true;
    const wf = workflow({ name: "fork-handler", version: "1" }, async (ctx) => {
      const [bad, sibling] = await Promise.all([
        ctx
          .step("bad", () => {
            if (broken) throw new FatalError("bad is broken");
            return "bad";
          })
          .catch(async (err) => {
            ctx.uuid("incident");
            await ctx.step("report", () => "reported");
            throw err;
          }),
        // Still running when "bad" fails the run: it finishes in the grace, recorded after.
        ctx.step("sibling", () => new Promise<string>((r) => setTimeout(() => r("sibling"), 100))),
      ]);
      return { bad, sibling };
    });
    // A fork that diverges is failed after replayStallMs: shortened, it fails at once.
    const e = h.engine([wf], { replayStallMs: 500 });
    const run = await e.start(wf, undefined, { id: "src" });
    await expect(advanceUntil(h.clock, run.result(), 100)).rejects.toThrow("bad is broken");
    const steps = await e.getSteps("src");
    expect(steps.filter((s) => !s.key.startsWith("@")).map((s) => [s.key, s.status])).toEqual([
      ["bad", "failed"],
      ["sibling", "completed"],
      ["report", "completed"],
    ]);
    broken = false;
    // docs/API.md, fork: "the fork executes that call again, as a resume would".
    const fork = await e.fork("src", { fromStep: "sibling", id: "fork" });
    expect(await advanceUntil(h.clock, fork.result(), 100)).toEqual({
      bad: "bad",
      sibling: "sibling",
    });
    await e.resume("src");
    expect(await advanceUntil(h.clock, e.handle("src").result(), 100)).toEqual({
      bad: "bad",
      sibling: "sibling",
    });
  });

  it("a resume never takes the outcome of a run that took a deleted child's id", async () => {
    const h = harness();
    const kid = workflow({ name: "gone-kid", version: "1" }, async (ctx) =>
      ctx.step("work", (): string => {
        throw new FatalError("kid broken");
      }),
    );
    const stranger = workflow({ name: "stranger", version: "1" }, async () => "not your child");
    const parent = workflow({ name: "orphaned-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid, undefined),
    );
    const e = h.engine([parent, kid, stranger]);
    const run = await e.start(parent, undefined, { id: "p" });
    await expect(advanceUntil(h.clock, run.result(), 100)).rejects.toThrow("kid broken");
    // Retention deletes the finished child; its id is then free, and a run of its own takes it.
    const store = h.store();
    await store.open({ clock: h.clock });
    expect(await store.deleteRun("p/kid")).toMatchObject({ deleted: true });
    await store.close();
    const taken = await e.start(stranger, undefined, { id: "p/kid" });
    expect(await advanceUntil(h.clock, taken.result(), 100)).toBe("not your child");
    await e.resume("p");
    // docs/API.md, resume: "a child retention deleted is a RunNotFoundError".
    await expect(advanceUntil(h.clock, e.handle("p").result(), 100)).rejects.toMatchObject({
      code: "RUN_NOT_FOUND",
    });
  });
});
