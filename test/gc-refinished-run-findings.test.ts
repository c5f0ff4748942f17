// Retention lists the runs that finished before its cutoff, then deletes them in another
// transaction. A run of that list resumed by another process and finished again in between
// finished just now, not before the cutoff: it must stay (with its new output), as the
// docs promise ("deletes every run that finished more than olderThan ago").

import { describe, expect, it } from "vitest";
import { createEngine, FatalError, type Store, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

describe.each(BACKENDS)("%s: gc racing a resume from another process", (backend) => {
  const harness = useHarness(backend);

  it("a run resumed and finished again between gc's listing and its delete is kept", async () => {
    const h = harness();
    let calls = 0;
    const wf = workflow({ name: "flaky", version: "1" }, async (ctx) =>
      ctx.step("s", () => {
        calls++;
        if (calls === 1) throw new FatalError("first try fails");
        return "second try works";
      }),
    );
    const w = h.engine([wf]);
    const run = await w.start(wf, undefined, { id: "g1" });
    await expect(within(run.result(), 20_000, "g1 fails")).rejects.toThrow(/first try/);
    // The failure is an hour old by the store's clock.
    await h.clock.advance(60 * 60_000);
    // Between gc's listing and its delete, another process resumes the run and it completes.
    const inner = h.store();
    let raced = false;
    const store = new Proxy(inner, {
      get(t, prop, recv) {
        const v = Reflect.get(t, prop, recv);
        if (prop === "deleteRuns") {
          return async (ids: string[], ...rest: unknown[]) => {
            if (!raced && ids.includes("g1")) {
              raced = true;
              await w.resume("g1");
              await within(w.handle("g1").result(), 20_000, "g1 resumed");
            }
            return (v as (...a: unknown[]) => unknown).call(t, ids, ...rest);
          };
        }
        return typeof v === "function" ? v.bind(t) : v;
      },
    }) as Store;
    const collector = createEngine({ store, workflows: [], clock: h.clock, worker: false });
    try {
      const res = await collector.gc({ olderThan: "30m" });
      expect(raced).toBe(true);
      // It finished a moment ago: younger than the cutoff, it stays, its output with it.
      expect(res.runs).toBe(0);
      const view = await w.getRun("g1");
      expect({ status: view?.status, output: view?.output }).toEqual({
        status: "completed",
        output: "second try works",
      });
    } finally {
      await collector.close();
    }
    await until(() => calls === 2, "ran twice");
  });
});
