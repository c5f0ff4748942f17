// A hint (an event came for a run executing here) read again every name the execution had
// read to its end (EventReads.reload), not only those its waits were blocked on: an
// execution that waited on N names one after another (a loop of `item-${i}` waits, a
// parent's N children, each child's end an event of its own name) read about N^2/2 pages:
// 30 names 791 reads, 60 1,824, 120 7,054 (SQLite). Now a hint reads the names waits are
// blocked on; the others are marked stale and read when a take of them finds nothing.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { around, gate } from "./helpers/store-verbs.js";

const N = 40;

describe.each(BACKENDS)("a hint reads the names waits are blocked on (%s)", (backend) => {
  const harness = useHarness(backend);

  it(`a loop of waits on ${N} names, each answered while the execution runs, reads a few pages per name`, async () => {
    const h = harness();
    // A step held open keeps one execution going through every wait (none suspends it).
    const busy = gate();
    const wf = workflow({ name: "loop", version: "1" }, async (ctx) => {
      const out: unknown[] = [];
      const loop = async () => {
        for (let i = 0; i < N; i++) {
          const w = await ctx.waitForEvent<number>(`item-${i}`);
          out.push(w.timedOut ? null : w.payload);
        }
      };
      await Promise.all([loop(), ctx.step("busy", () => busy.opened)]);
      return out;
    });
    let reads = 0;
    const store = around(h.store(), {
      pendingEventHeadsNamed: async (call, ...args) => {
        reads++;
        return call(...args);
      },
    });
    const e = h.engine([wf], { store });
    await e.start(wf, undefined, { id: "l" });
    for (let i = 0; i < N; i++) {
      const before = reads;
      await e.sendEvent("l", `item-${i}`, i);
      // The wait of item-i took its event and the next one is blocked (or the loop ended).
      await until(async () => reads > before + 1 || i === N - 1, `the wait of item-${i + 1}`);
    }
    busy.open();
    expect(await advanceUntil(h.clock, e.handle("l").result(), 10)).toEqual(
      Array.from({ length: N }, (_, i) => i),
    );
    // Each name: its first read, and the hint's read of the name waited on (before: every
    // name read so far, at each hint: about N^2/2 = 800).
    expect(reads).toBeLessThanOrEqual(3 * N);
  });

  it("a name a hint passed over (stale) is read when a wait takes of it: its event sent meanwhile is taken in the same execution", async () => {
    const h = harness();
    const busy = gate();
    const wf = workflow({ name: "stale", version: "1" }, async (ctx) => {
      const out: unknown[] = [];
      const waits = async () => {
        for (const name of ["b", "a", "b"]) {
          const w = await ctx.waitForEvent<string>(name);
          out.push(w.timedOut ? null : w.payload);
        }
      };
      await Promise.all([waits(), ctx.step("busy", () => busy.opened)]);
      return out;
    });
    let reads = 0;
    let loads = 0;
    const store = around(h.store(), {
      pendingEventHeadsNamed: async (call, ...args) => {
        reads++;
        return call(...args);
      },
      loadJournal: async (call, ...args) => {
        loads++;
        return call(...args);
      },
    });
    const client = h.engine([], { worker: false });
    await client.start(wf, undefined, { id: "s" });
    await client.sendEvent("s", "b", "b0");
    const e = h.engine([wf], { store });
    await until(async () => reads >= 2, "the wait on a blocked");
    // Hinted while only "a" is waited on: "b" is passed over, marked stale.
    await e.sendEvent("s", "b", "b1");
    await e.sendEvent("s", "a", "a0");
    await until(async () => reads >= 4, "a read, then b read again");
    busy.open();
    expect(await advanceUntil(h.clock, e.handle("s").result(), 10)).toEqual(["b0", "a0", "b1"]);
    expect(loads).toBe(1);
  });
});
