// A wait took its event and reads the payload (Store.eventPayloads) when the engine closes,
// or the run is canceled, or the read fails: nothing is rejected unhandled, and the run is
// not left stuck: another engine (or the same one) finishes it with the event's payload.
// Both backends.

import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type WaitResult, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { around, gate } from "./helpers/store-verbs.js";

const got = <T>(w: WaitResult<T>): T | undefined => (w.timedOut ? undefined : w.payload);

const one = workflow({ name: "one", version: "1" }, async (ctx) => {
  const w = await ctx.waitForEvent<string>("x");
  return got(w);
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

  it("close() while a wait's payload read is in flight: handed back, the next engine takes the event", async () => {
    const h = harness();
    const client = h.engine([], { worker: false });
    await client.start(one, undefined, { id: "c" });
    await client.sendEvent("c", "x", "payload");
    const g = gate();
    const asked = gate();
    const store = around(h.store(), {
      eventPayloads: async (call, ...args) => {
        asked.open();
        await g.opened;
        return call(...args);
      },
    });
    const e1 = h.engine([one], { store, closeGraceMs: 50, log: () => {} });
    await asked.opened;
    const closed = e1.close();
    setTimeout(g.open, 100);
    await closed;
    await new Promise((r) => setTimeout(r, 150));
    expect((await client.getRun("c"))?.status).not.toBe("completed");
    const e2 = h.engine([one]);
    expect(await advanceUntil(h.clock, e2.handle("c").result(), 100)).toBe("payload");
    expect(unhandled).toEqual([]);
  });

  it("cancel while a wait's payload read is in flight ends the run canceled", async () => {
    const h = harness();
    const client = h.engine([], { worker: false });
    await client.start(one, undefined, { id: "k" });
    await client.sendEvent("k", "x", "payload");
    const g = gate();
    const asked = gate();
    const store = around(h.store(), {
      eventPayloads: async (call, ...args) => {
        asked.open();
        await g.opened;
        return call(...args);
      },
    });
    const e = h.engine([one], { store, log: () => {} });
    await asked.opened;
    await e.cancel("k", "stop");
    g.open();
    await until(async () => (await e.getRun("k"))?.status === "canceled", "canceled");
    await new Promise((r) => setTimeout(r, 50));
    expect(unhandled).toEqual([]);
  });

  it("a payload read that fails once hands the run back; the next execution takes the event", async () => {
    const h = harness();
    const client = h.engine([], { worker: false });
    await client.start(one, undefined, { id: "f" });
    await client.sendEvent("f", "x", "payload");
    let failed = 0;
    const store = around(h.store(), {
      eventPayloads: async (call, ...args) => {
        if (failed++ === 0) throw new Error("connection reset");
        return call(...args);
      },
    });
    const e = h.engine([one], { store, log: () => {} });
    expect(await advanceUntil(h.clock, e.handle("f").result(), 100)).toBe("payload");
    expect(failed).toBeGreaterThan(1);
    expect(unhandled).toEqual([]);
  });
});
