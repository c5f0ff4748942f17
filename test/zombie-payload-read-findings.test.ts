// A worker took a wait's event and reads its payload (Store.eventPayloads) when it loses the
// run: its lease runs out (its renewals no longer land), another worker claims the run,
// takes the same event and finishes. The first worker's read then answers (eventPayloads
// answers consumed events too): its record is fenced, nothing of it lands, the run keeps
// the second worker's outcome, and nothing is rejected unhandled. Both backends.

import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type WaitResult, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { around, gate } from "./helpers/store-verbs.js";

const got = <T>(w: WaitResult<T>): T | undefined => (w.timedOut ? undefined : w.payload);

const twice = workflow({ name: "twice", version: "1" }, async (ctx) => {
  const a = got(await ctx.waitForEvent<string>("x"));
  const b = await ctx.step("after", () => `after ${a}`);
  return [a, b];
});

const unhandled: unknown[] = [];
const onUnhandled = (e: unknown) => unhandled.push(e);
beforeEach(() => {
  unhandled.length = 0;
  process.on("unhandledRejection", onUnhandled);
});
afterEach(() => {
  process.off("unhandledRejection", onUnhandled);
});

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a zombie's payload read answering after the run was taken over writes nothing", async () => {
    const h = harness();
    const client = h.engine([], { worker: false });
    await client.start(twice, undefined, { id: "z" });
    await client.sendEvent("z", "x", "first");
    await client.sendEvent("z", "x", "second");
    const g = gate();
    const asked = gate();
    const stuck = new Promise<never>(() => {});
    let zombie = false;
    const store = around(h.store(), {
      eventPayloads: async (call, ...args) => {
        zombie = true;
        asked.open();
        await g.opened;
        return call(...args);
      },
      renewLeases: async (call, ...args) => (zombie ? stuck : call(...args)),
    });
    // closeGraceMs 0: its close() after the test does not wait (2 s) for its stuck renewal.
    const e1 = h.engine([twice], { store, leaseMs: 5_000, closeGraceMs: 0, log: () => {} });
    await asked.opened;
    const e2 = h.engine([twice], { leaseMs: 5_000 });
    const out = await advanceUntil(h.clock, e2.handle("z").result(), 500);
    expect(out).toEqual(["first", "after first"]);
    g.open();
    await new Promise((r) => setTimeout(r, 100));
    const left = (await e2.listEvents("z")).filter((ev) => !ev.consumedBy);
    expect(left.map((ev) => ev.payload)).toEqual(["second"]);
    expect((await e2.getSteps("z")).map((s) => [s.key, s.status])).toEqual([
      ["x", "completed"],
      ["after", "completed"],
    ]);
    expect((await e2.getRun("z"))?.status).toBe("completed");
    expect(unhandled).toEqual([]);
    await e1.close();
  });
});
