// held runs (Release's heldFor) in shapes not tried before: the holding engine closed
// while the body runs on, and a hold lost (its renewals failing) while the body runs on, so
// that another worker takes the run: the older worker's late end of the hold must not end
// what the newer claim holds.

import { describe, expect, it } from "vitest";
import { createEngine, type Engine } from "../src/index.js";
import type { Store } from "../src/store-api.js";
import { createVirtualClock } from "../src/testing/index.js";
import { deafFailingRun } from "./helpers/deaf-run.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();
const LEASE_MS = 5_000;

describe.each(BACKENDS)("%s: held runs", (backend) => {
  function setup(name: string) {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const deaf = deafFailingRun(name, cleanups);
    const open = (store: Store): Engine => {
      const e = createEngine({
        workflows: [deaf.wf],
        clock,
        pollIntervalMs: 10,
        abortGraceMs: 20,
        leaseMs: LEASE_MS,
        log: () => {},
        store,
      });
      cleanups.push(() => e.close());
      return e;
    };
    return { ...deaf, makeStore, clock, open };
  }

  it("an engine closed while the body runs on keeps the hold: no other worker begins the call beside it", async () => {
    const { wf, seen, latch, makeStore, clock, open } = setup("closed-mid-hold");
    const a = open(makeStore());
    await a.start(wf, undefined, { id: "r" });
    await until(async () => (await a.getRun("r"))?.status === "failed", "the run failed");
    const holder = (await a.getRun("r"))?.heldBy;
    expect(holder).toEqual(expect.any(String));
    await a.close();
    expect(seen.running).toBe(1);
    let bClaims = 0;
    const b = open(
      around(makeStore(), {
        claimRuns: async (call, ...args) => {
          bClaims++;
          return call(...args);
        },
      }),
    );
    // close() removed A's row, not its hold: the body still runs in A's process.
    expect((await b.getRun("r"))?.heldBy).toBe(holder);
    await b.resume("r");
    for (const step of [1_000, 1_000, 1_000]) {
      const before = bClaims;
      await clock.advance(step);
      await until(() => bClaims > before + 1, "B's claim rounds");
    }
    expect({ begun: seen.begun, status: (await b.getRun("r"))?.status }).toEqual({
      begun: 1,
      status: "pending",
    });
    latch.open();
    await until(() => seen.running === 0, "A's body ended");
    // Nothing in A ends its hold now (it is closed): the hold runs out, then B takes it.
    await clock.advance(LEASE_MS);
    expect(await b.handle("r").result()).toEqual(["slow", "fixed"]);
    expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 2, most: 1 });
  });

  it("a hold lost while the body ran: its late end leaves the newer claim's run alone", async () => {
    const { wf, seen, latch, makeStore, clock, open } = setup("lost-hold");
    let renewals = true;
    let aClaims = true;
    const ended: unknown[] = [];
    const a = open(
      around(makeStore(), {
        claimRuns: async (call, ...args) => (aClaims ? call(...args) : []),
        renewLeases: async (call, ...args) => {
          const [p] = args as [{ endHolds?: unknown[] }];
          if (p.endHolds) ended.push(...p.endHolds);
          else if (!renewals) throw new Error("renewal lost (injected)");
          return call(...args);
        },
      }),
    );
    await a.start(wf, undefined, { id: "r" });
    await until(async () => (await a.getRun("r"))?.status === "failed", "the run failed");
    // A's heartbeat stops reaching the store, and A takes nothing more: B alone may.
    renewals = false;
    aClaims = false;
    const b = open(makeStore());
    await b.resume("r");
    await clock.advance(LEASE_MS + 1_000);
    // The hold ran out: B executes the run, its "slow" beside A's (no worker can stop a body
    // deaf to its abort past its lease; a step timeout bounds it).
    await until(() => seen.begun === 2, "B began the call");
    const side = makeStore();
    await side.open({ clock });
    cleanups.push(() => side.close());
    const taken = await side.getRun("r");
    expect([taken?.status, taken?.heldBy]).toEqual(["running", null]);
    latch.open();
    expect(await b.handle("r").result()).toEqual(["slow", "fixed"]);
    await until(() => ended.length > 0, "A's end of its hold sent");
    // A's end of its hold named its own epoch, which B's claim had moved on: fenced.
    expect((ended[0] as { epoch: number }).epoch).toBeLessThan(taken!.epoch);
    expect(seen.bad).toBe(2);
  });
});
