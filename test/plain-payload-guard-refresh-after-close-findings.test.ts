// A plain store's guard reads the mark again in the background when its "not marked" is
// older than MARK_FRESH_MS, asked by a write; a close() right after that write must let the
// write land, and the background read that then fails (the store closed) is no unhandled
// rejection, and the next open reads the mark afresh. Both backends.

import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MARK_FRESH_MS } from "../src/store/plain-payloads.js";
import type { NewRun } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";

const newRun = (id: string): NewRun => ({
  id,
  workflow: "wf",
  version: "1",
  input: '"plain"',
  budgetLimit: {},
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

describe.each(BACKENDS)("the guard's background read after close() (%s)", (backend) => {
  it("the write lands, the read's failure is caught, a reopen writes again", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    try {
      const make = freshStorage(backend, cleanups);
      const clock = createVirtualClock();
      const plain = make();
      await plain.open({ clock });
      await clock.advance(MARK_FRESH_MS * 5);
      const write = plain.createRun(newRun("r1"));
      const closed = plain.close();
      expect((await write).created).toBe(true);
      await closed;
      await new Promise((r) => setTimeout(r, 100));
      expect(unhandled).toEqual([]);
      const again = make();
      await again.open({ clock });
      cleanups.push(() => again.close());
      expect((await again.getRun("r1"))?.input).toBe('"plain"');
      expect((await again.createRun(newRun("r2"))).created).toBe(true);
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });
});
