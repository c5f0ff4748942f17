// Findings on the worker's lifecycle mends (close() past its grace handing runs back, runs
// leased by a lost claim, the sweep beside the heartbeat, a hanging open). Each test failed
// on the code it was written against, and stays as the regression test of its mend.

import { describe, expect, it } from "vitest";
import { createEngine, type Store, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const finished = new Set(["completed", "failed", "canceled"]);

describe.each(BACKENDS)("close() past its grace with a child start in flight (%s)", (backend) => {
  const harness = useHarness(backend);

  it("does not hand the parent back (canceled) before its child exists: the child is canceled with it", async () => {
    const h = harness();
    let childBodies = 0;
    const child = workflow({ name: "kid", version: "1" }, async (ctx) =>
      ctx.step("work", () => {
        childBodies++;
        return 1;
      }),
    );
    const parent = workflow({ name: "parent", version: "1" }, async (ctx) =>
      ctx.child("kid", child, 1),
    );
    // The child's create is slow (a lock wait): it commits only after whatever cancel
    // cascade of the parent has read its children, as a create on the wire may.
    let creating = false;
    let land: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      land = resolve;
    });
    let landed: Promise<unknown> = Promise.resolve();
    const inner = h.store();
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === "createRun") {
          return (run: Parameters<Store["createRun"]>[0]) => {
            if (run.parentId !== "p") return target.createRun(run);
            creating = true;
            const made = gate.then(() => target.createRun(run));
            landed = made.catch(() => {});
            return made;
          };
        }
        if (prop === "listRuns") {
          return async (filter: Parameters<Store["listRuns"]>[0]) => {
            const res = await target.listRuns(filter);
            if (filter?.parentId === "p") {
              land();
              await landed;
            }
            return res;
          };
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    const a = createEngine({
      store,
      workflows: [parent, child],
      clock: h.clock,
      concurrency: 1,
      leaseMs: 60_000,
      closeGraceMs: 20,
      pollIntervalMs: 10,
      logger: quiet,
    });
    const client = h.engine([], { worker: false });
    try {
      await a.start(parent, undefined, { id: "p" });
      await until(() => creating, "the child's create under way");
      // A cancel of the parent is asked while its child is being created.
      await client.cancel("p", "stop");
      await a.close();
    } finally {
      land();
      await a.close();
    }
    await landed;
    const b = h.engine([parent, child], { leaseMs: 60_000, logger: quiet });
    await b.listRuns({ limit: 1 });
    await h.clock.advance(61_000);
    const kidOf = async () => (await client.listRuns({ parentId: "p" }))[0];
    await until(async () => {
      const [p, k] = await Promise.all([client.getRun("p"), kidOf()]);
      return p?.status === "canceled" && (k === undefined || finished.has(k.status));
    }, "the parent canceled and its child, if any, ended");
    // Before: the parent went back (canceled, its cascade finding no child) while the child's
    // create was in flight; the child landed after and executed for a canceled parent.
    expect(childBodies).toBe(0);
    expect((await kidOf())?.status ?? "canceled").toBe("canceled");
  });
});

describe.each(BACKENDS)("close() while a run is being paused (%s)", (backend) => {
  const harness = useHarness(backend);

  it("leaves the pause to land: a run whose input cannot be read ends paused, not handed back pending", async () => {
    const h = harness();
    const wf = workflow({ name: "damaged", version: "1" }, async () => 1);
    // The pause's write is slow: it lands once close() has moved on past its waits (here,
    // when the worker's row goes), or right after a hand-back of the same run.
    let pausing = false;
    let land: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      land = resolve;
    });
    let paused: Promise<unknown> = Promise.resolve();
    const inner = h.store();
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === "releaseRun") {
          return async (r: Parameters<Store["releaseRun"]>[0]) => {
            if (r.runId !== "d") return target.releaseRun(r);
            if (r.status === "paused") {
              pausing = true;
              const res = gate.then(() => target.releaseRun(r));
              paused = res.catch(() => {});
              return res;
            }
            const res = await target.releaseRun(r);
            land();
            await paused;
            return res;
          };
        }
        if (prop === "removeWorker") {
          return async (...args: Parameters<Store["removeWorker"]>) => {
            land();
            await paused;
            return target.removeWorker(...args);
          };
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    const client = h.engine([], { worker: false });
    await client.listRuns({ limit: 1 });
    const raw = h.store();
    await raw.open({ clock: h.clock });
    // Input no codec can read (damaged).
    await raw.createRun({
      id: "d",
      workflow: "damaged",
      version: "1",
      input: "{nope",
      budgetLimit: {},
    });
    await raw.close();
    const a = createEngine({
      store,
      workflows: [wf],
      clock: h.clock,
      leaseMs: 60_000,
      closeGraceMs: 20,
      pollIntervalMs: 10,
      logger: quiet,
    });
    try {
      await until(() => pausing, "the pause under way");
      await a.close();
    } finally {
      land();
      await a.close();
    }
    // Before: close() took the execution for one with nothing to write and handed the run
    // back (pending) under its pause: claimed again, refused again, for ever.
    const run = await client.getRun("d");
    expect(run?.status).toBe("paused");
    expect(run?.reason).toContain("damaged");
  });
});

describe.each(BACKENDS)("a second release at the same epoch (%s)", (backend) => {
  const harness = useHarness(backend);

  it("is refused once the run is no longer running: a completed run is not handed back pending", async () => {
    const h = harness();
    const store = h.store();
    await store.open({ clock: h.clock });
    try {
      const newRun = (id: string) => ({
        id,
        workflow: "w",
        version: "1",
        input: "1",
        budgetLimit: {},
      });
      await store.createRun(newRun("solo"));
      await store.createRun({ ...newRun("kid"), parentId: "solo" });
      const claims = await store.claimRuns({
        workerId: "w1",
        workflows: ["w@1"],
        limit: 2,
        leaseMs: 60_000,
      });
      expect(claims).toHaveLength(2);
      for (const { run } of claims) {
        const done = await store.releaseRun({
          runId: run.id,
          epoch: run.epoch,
          status: "completed",
          output: "2",
          readyAt: null,
        });
        expect(done.ok).toBe(true);
        // A late hand-back under the same epoch (close() past its grace, a hand-back after a
        // store error whose release had committed): with no events (a run of its own) and
        // with them (a child's hand-back carries its parent's event if canceled).
        const late = await store.releaseRun({
          runId: run.id,
          epoch: run.epoch,
          status: "pending",
          readyAt: await store.now(),
          reason: null,
          ...(run.parentId && {
            eventsIfCanceled: [{ runId: run.parentId, name: "x", payload: "null" }],
          }),
        });
        // Before (PostgreSQL): the release was fenced by epoch alone, so the completed run
        // went back to pending (and would execute again); SQLite refused it.
        expect(late.ok).toBe(false);
        const after = await store.getRun(run.id);
        expect({ status: after?.status, output: after?.output }).toEqual({
          status: "completed",
          output: "2",
        });
      }
    } finally {
      await store.close();
    }
  });
});
