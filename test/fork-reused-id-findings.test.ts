// engine.fork() reads the source's journal, then the store copies the chosen records (by key
// and generation) from the run under the source's id. A source deleted by retention and
// started again under its id in between (an id reused, as documented) had the NEW run's
// records copied into a fork planned from the old one's: a fork holding values its source
// never recorded. The store now checks, in the copy's transaction, that the run under the id
// is the one read (its creation time), and the fork is refused naming the id.

import { describe, expect, it } from "vitest";
import { createEngine, type Store, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { within } from "./helpers/within.js";

describe.each(BACKENDS)("%s: a fork whose source id is reused while it forks", (backend) => {
  const harness = useHarness(backend);

  it("copies nothing of the new run under the id: the fork is refused", async () => {
    const h = harness();
    const wf = workflow({ name: "nightly", version: "1" }, async (ctx, day: string) => {
      const data = await ctx.step("fetch", () => `data of ${day}`);
      return ctx.step("report", () => `report on ${data}`);
    });
    const w = h.engine([wf]);
    const first = await w.start(wf, "monday", { id: "nightly" });
    expect(await within(first.result(), 20_000, "monday")).toBe("report on data of monday");
    const inner = h.store();
    let raced = false;
    const store = new Proxy(inner, {
      get(t, prop, recv) {
        const v = Reflect.get(t, prop, recv);
        if (prop === "forkRun") {
          return async (...args: unknown[]) => {
            if (!raced) {
              raced = true;
              // Retention deletes monday's run; tuesday's takes the id and completes.
              await h.clock.advance(60_000);
              expect((await w.gc({ olderThan: "1s" })).runs).toBe(1);
              const second = await w.start(wf, "tuesday", { id: "nightly" });
              await within(second.result(), 20_000, "tuesday");
            }
            return (v as (...a: unknown[]) => unknown).apply(t, args);
          };
        }
        return typeof v === "function" ? v.bind(t) : v;
      },
    }) as Store;
    const client = createEngine({ store, workflows: [], clock: h.clock, worker: false });
    try {
      const forked = await client.fork("nightly", { fromStep: "report", id: "monday-again" }).then(
        () => "forked",
        (err: Error) => `${err.name}: ${err.message}`,
      );
      expect(raced).toBe(true);
      expect(forked).toBe(
        'RunNotFoundError: Run "nightly" does not exist; it was deleted while it was being forked (another run has taken its id since); nothing was forked',
      );
      expect(await w.getRun("monday-again")).toBeUndefined();
    } finally {
      await client.close();
    }
  });
});
