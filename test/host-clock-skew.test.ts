// A worker whose host clock disagrees with PostgreSQL's. The store judges when a run is due
// by the database's clock; the run's timers (sleeps, retry backoff, deadlines) and ctx.now()
// are taken from the database's clock as well, measured at each claim, so that a skewed host
// neither claims a sleeping run over and over (host behind) nor sleeps longer than asked
// (host ahead).

import { afterEach, describe, expect, it } from "vitest";
import { storeClockAhead } from "../src/engine/store-clock-ahead.js";
import { createEngine, realClock, workflow } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { within } from "./helpers/within.js";

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** The system's clock, read `skewMs` off: a host whose clock is wrong. */
function hostClock(skewMs: number) {
  return { system: true, now: () => Date.now() + skewMs, sleep: realClock.sleep };
}

function pgStore() {
  const { schema, drop } = testSchema(pgUrl!, "cairn_skew");
  cleanups.push(drop);
  return postgresStore(pgUrl!, { schema });
}

describe("storeClockAhead: the store's clock against this host's, from one claim", () => {
  const lease = { leaseMs: 30_000 };
  const stamped = (storeNow: number) => ({ leaseUntil: storeNow + lease.leaseMs });
  it("is 0 when the store stamped the lease while the host waited for it", () => {
    expect(storeClockAhead(stamped(1_000), lease.leaseMs, 1_000, 1_000)).toBe(0);
    expect(storeClockAhead(stamped(1_050), lease.leaseMs, 1_000, 1_200)).toBe(0);
  });
  it("counts skew from the window's nearer edge", () => {
    expect(storeClockAhead(stamped(5_000), lease.leaseMs, 1_000, 1_200)).toBe(3_800);
    expect(storeClockAhead(stamped(-2_000), lease.leaseMs, 1_000, 1_200)).toBe(-3_000);
  });
  it("is 0 for a run with no lease", () => {
    expect(storeClockAhead({ leaseUntil: null }, lease.leaseMs, 1_000, 1_200)).toBe(0);
  });
});

describe.runIf(pgUrl)("postgres: a worker whose host clock is off", () => {
  it("host 3 s behind: a 1 s sleep is claimed once for its end, not over and over", async () => {
    const wf = workflow({ name: "nap-behind", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1s");
      return ctx.step("after", () => "woke");
    });
    const engine = createEngine({
      store: pgStore(),
      workflows: [wf],
      clock: hostClock(-3_000),
      pollIntervalMs: 20,
    });
    cleanups.push(() => engine.close());
    const run = await engine.start(wf, undefined, { id: "behind" });
    expect(await within(run.result(), 20_000, "behind")).toBe("woke");
    // Created claimed (1), then claimed once the sleep ended; a slow machine may take one
    // more claim, never the dozens a host behind the database made.
    expect(engine.metrics().claimed).toBeLessThanOrEqual(2);
  }, 30_000);

  it("host 3 s ahead: a 1 s sleep is stored as due 1 s later by the database's clock", async () => {
    const wf = workflow({ name: "nap-ahead", version: "1" }, async (ctx) => {
      const before = await ctx.now("before");
      await ctx.sleep("nap", "60s");
      return before;
    });
    const engine = createEngine({
      store: pgStore(),
      workflows: [wf],
      clock: hostClock(3_000),
      pollIntervalMs: 20,
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "ahead" });
    let waiting = await engine.getRun("ahead");
    for (let i = 0; i < 200 && waiting?.status !== "waiting"; i++) {
      await new Promise((r) => setTimeout(r, 25));
      waiting = await engine.getRun("ahead");
    }
    expect(waiting?.status).toBe("waiting");
    // updatedAt is the database's time of the release; the wake is 60 s after the sleep
    // began, by the same clock (3 s ahead, it was 63 s). The shift is measured from one
    // claim's round trip, so it may be off by that much: a second is far more than enough.
    const due = waiting!.wakeAt!.getTime() - waiting!.updatedAt.getTime();
    expect(due).toBeGreaterThan(59_000);
    expect(due).toBeLessThan(61_000);
  }, 30_000);
});
