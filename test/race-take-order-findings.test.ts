// Promise.race of two waits of different names whose events are both pending: the first
// wait takes its event first. Before payloads were read lazily that wait recorded first and
// won; now each wait reads its payload (Store.eventPayloads) before it records, so the
// winner was whichever read answered first: on PostgreSQL (a pool, reads in parallel) a
// larger payload of the earlier event lost to the later one, run to run. Made deterministic
// here by holding the first wait's read until the second's has answered. Both backends.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { around, gate } from "./helpers/store-verbs.js";

const race = workflow({ name: "race", version: "1" }, async (ctx) =>
  Promise.race([
    ctx.waitForEvent<string>("a").then((w) => `a ${w.timedOut ? "" : w.payload}`),
    ctx.waitForEvent<string>("b").then((w) => `b ${w.timedOut ? "" : w.payload}`),
  ]),
);

describe.each(BACKENDS)("a race of two pending events (%s)", (backend) => {
  const harness = useHarness(backend);

  it("is won by the wait that took its event first, however its payload read is delayed", async () => {
    const h = harness();
    const client = h.engine([], { worker: false });
    await client.start(race, undefined, { id: "r" });
    const a = await client.sendEvent("r", "a", "first");
    await client.sendEvent("r", "b", "second");
    const bAnswered = gate();
    const store = around(h.store(), {
      eventPayloads: async (call, ...args) => {
        const seqs = args[1] as number[];
        if (seqs.includes(a.event.seq)) {
          await bAnswered.opened;
          return call(...args);
        }
        const res = await call(...args);
        setTimeout(bAnswered.open, 20);
        return res;
      },
    });
    const e = h.engine([race], { store });
    expect(await advanceUntil(h.clock, e.handle("r").result(), 100)).toBe("a first");
  });
});
