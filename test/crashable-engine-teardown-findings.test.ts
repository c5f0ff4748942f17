// crashableEngine (test/helpers/crash.ts) closed the frozen engine's store in an
// afterEach of its own module, registered when it was imported: it ran after useHarness's
// cleanup had emptied or dropped the storage. On PostgreSQL the schema, a connection of the
// frozen store still open, could not be reused and was dropped under it, and the close's
// error was swallowed. Its cleanup is now one of the harness's, run before the storage goes.

import { describe, expect, it } from "vitest";
import { type Store, workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { type Harness, pgUrl, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const waits = workflow({ name: "teardown", version: "1" }, async (ctx) => ctx.waitForEvent("go"));

/** What the frozen engine's store held when its connection was closed. */
const atClose: Array<{ runs?: string[]; error?: string }> = [];

/** `store` whose close() first reads the runs the storage holds. */
function readsAtClose(store: Store): Store {
  return new Proxy(store, {
    get(target, key) {
      if (key === "close") {
        return async () => {
          try {
            atClose.push({ runs: (await target.listRuns()).map((r) => r.id) });
          } catch (err) {
            atClose.push({ error: (err as Error).message });
          }
          return target.close();
        };
      }
      const v = Reflect.get(target, key, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

describe.skipIf(!pgUrl)("a crashed crashableEngine's teardown (PostgreSQL)", () => {
  const harness = useHarness("postgres");

  it("crashes an engine holding a waiting run", async () => {
    const h = harness();
    const probe: Harness = { ...h, store: () => readsAtClose(h.store()) };
    const c = crashableEngine(probe, [waits]);
    await c.engine.start(waits, undefined, { id: "t1" });
    await until(async () => (await c.engine.getRun("t1"))?.status === "waiting", "t1 waits");
    c.crash();
  });

  it("its store was closed before the harness removed the storage", () => {
    expect(atClose).toEqual([{ runs: ["t1"] }]);
  });
});
