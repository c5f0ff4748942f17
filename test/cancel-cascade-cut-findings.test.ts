// engine.cancel() of a run not executing cancels the run in one transaction, then its
// unfinished children one by one after it (cancel-children.ts). A store failure between the
// two left the children running with cancel() rejecting with the store's bare error: it
// named no run and did not say that the parent was canceled nor that canceling it again
// cancels the children. A process that dies there leaves them to the workers' sweep (below).

import { describe, expect, it } from "vitest";
import { createEngine, type Store, workflow } from "../src/index.js";
import { BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const kid = workflow({ name: "kid", version: "1" }, async (ctx) => {
  const e = await ctx.waitForEvent("never");
  return e.timedOut;
});
const parent = workflow({ name: "parent", version: "1" }, async (ctx) =>
  ctx.child("k", kid, undefined),
);

/** A parent waiting for its child, which waits for an event no one sends; and a client
 *  whose store fails listing the parent's children (the cascade's first read). */
async function cutCascade(h: Harness) {
  const w = h.engine([parent, kid]);
  await w.start(parent, undefined, { id: "p" });
  await until(
    async () =>
      (await w.getRun("p/k"))?.status === "waiting" && (await w.getRun("p"))?.status === "waiting",
    "parent and child wait",
  );
  const inner = h.store();
  const store = new Proxy(inner, {
    get(t, prop, recv) {
      const v = Reflect.get(t, prop, recv);
      if (prop === "listRuns") {
        return async (f: { parentId?: string }) => {
          if (f?.parentId !== undefined) throw new Error("connection lost (injected)");
          return (v as (x: unknown) => unknown).call(t, f);
        };
      }
      return typeof v === "function" ? v.bind(t) : v;
    },
  }) as Store;
  const client = createEngine({ store, workflows: [], clock: h.clock, worker: false });
  const err = await client.cancel("p", "stop").then(
    () => undefined,
    (e: Error) => e,
  );
  await client.close();
  return { w, err };
}

describe.each(BACKENDS)("%s: a cancel whose cascade to the children is cut", (backend) => {
  const harness = useHarness(backend);

  it("rejects naming the canceled run and saying to cancel it again, which cancels the children", async () => {
    const h = harness();
    const { w, err } = await cutCascade(h);
    expect((await w.getRun("p"))?.status).toBe("canceled");
    expect((await w.getRun("p/k"))?.status).toBe("waiting");
    expect({ name: err?.name, message: err?.message }).toEqual({
      name: "StoreError",
      message:
        'Run "p" was canceled, but canceling its unfinished child runs failed (Error: connection lost (injected)); cancel run "p" again to cancel them',
    });
    // As it says: canceling the canceled run again cancels its children.
    await w.cancel("p", "again");
    expect((await w.getRun("p/k"))?.status).toBe("canceled");
  });

  // The cascade is not durable: once the parent's cancel has committed, only the process
  // that asked it cancels the children. When that process dies (or its store fails) before
  // the cascade, the workers' sweep of children of canceled runs cancels them
  // (engine/children-of-canceled.ts; more cases in children-of-canceled-sweep-findings.test.ts).
  it("the children of a parent canceled by a process that died mid-cascade are canceled by the workers", async () => {
    const h = harness();
    const { w } = await cutCascade(h);
    // Many leases, heartbeats and claim rounds later, and a worker started since.
    const w2 = h.engine([parent, kid]);
    for (let i = 0; i < 40; i++) {
      await h.clock.advance(10_000);
      await new Promise((r) => setTimeout(r, 10));
    }
    expect((await w2.getRun("p/k"))?.status).toBe("canceled");
    expect((await w.getRun("p"))?.status).toBe("canceled");
  });
});
