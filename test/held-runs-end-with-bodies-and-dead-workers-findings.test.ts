// when a run's hold (Release's heldFor: released while a step body of it ran on in its
// worker) ends. Each test failed on the code it was written against, and stays as the
// regression test of its mend.

import { spawn } from "node:child_process";
import { hostname } from "node:os";
import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { pidNamespace } from "../src/lib/process-identity.js";
import { createVirtualClock } from "../src/testing/index.js";
import { deafFailingRun } from "./helpers/deaf-run.js";
import { BACKENDS, freshStorage, useHarness } from "./helpers/engines.js";
import { cleanupsAfterEach } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const LEASE_MS = 60_000;
const cleanups = cleanupsAfterEach();

/** A pid that was ours and is gone. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], {
    stdio: "ignore",
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.kill("SIGKILL");
  await exited;
  return child.pid!;
}

const wf = workflow({ name: "held", version: "1" }, async (ctx) => ctx.step("work", () => "done"));

describe.each(BACKENDS)("%s: a dead worker's hold", (backend) => {
  const harness = useHarness(backend);
  const ns = pidNamespace();

  // Before: removeWorker (a worker on this host whose pid is dead) ended the dead worker's
  // leases at once but not its holds: a run it had released held for a body (which died
  // with it) waited out the hold, a whole lease, before any other worker took it.
  it.skipIf(ns === null)("ends when its row is removed: the run is taken at once", async () => {
    const h = harness();
    const side = h.store();
    await side.open({ clock: h.clock });
    cleanups.push(() => side.close());
    const fake = { id: "wrk_dead", pid: await deadPid(), pidNamespace: ns };
    await side.registerWorker({ ...fake, host: hostname(), workflows: [wf.id] });
    await side.createRun({
      id: "r",
      workflow: wf.name,
      version: wf.version,
      input: "[null]",
      budgetLimit: {},
    });
    const [claimed] = await side.claimRuns({
      workerId: fake.id,
      workflows: [wf.id],
      limit: 1,
      leaseMs: LEASE_MS,
    });
    const now = await side.now();
    const released = await side.releaseRun({
      runId: "r",
      epoch: claimed!.run.epoch,
      status: "pending",
      readyAt: now,
      heldFor: { workerId: fake.id, ms: LEASE_MS },
    });
    expect(released.ok).toBe(true);
    const e = h.engine([wf], { leaseMs: LEASE_MS, heartbeatMs: 1_000 });
    await until(
      async () => !(await side.listWorkers()).some((w) => w.id === fake.id),
      "the dead row removed",
    );
    await h.clock.advance(1_000);
    // The clock moved 1 s of the hold's 60.
    expect(await within(e.handle("r").result(), 10_000, "the run")).toBe("done");
  });
});

describe.each(BACKENDS)("%s: a hold whose body ends", (backend) => {
  // Before: the hold stayed until its time (a lease) after the body it was set for had
  // ended: no other worker could take the run meanwhile, though nothing of it ran anywhere
  // (its own worker takes it only while it has room).
  it("ends with the body: another worker may claim the run at once", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const { wf: deaf, seen, latch } = deafFailingRun("held-briefly", cleanups);
    const engine = createEngine({
      store: makeStore(),
      workflows: [deaf],
      clock,
      pollIntervalMs: 10,
      abortGraceMs: 20,
      log: () => {},
    });
    cleanups.push(() => engine.close());
    await engine.start(deaf, undefined, { id: "r" });
    await until(async () => (await engine.getRun("r"))?.status === "failed", "the run failed");
    const other = makeStore();
    await other.open({ clock });
    cleanups.push(() => other.close());
    const held = await other.getRun("r");
    expect(held?.heldBy).toEqual(expect.any(String));
    expect(seen.running).toBe(1);
    latch.open();
    // The virtual clock stands still: only the body's end can end the hold.
    await until(async () => (await other.getRun("r"))?.heldBy === null, "the hold ended", 5_000);
    await engine.close();
    // Closed with no body running it would end the hold too; it was over before.
    expect((await other.resumeRun("r", {})).ok).toBe(true);
    const claimed = await other.claimRuns({
      workerId: "wrk_other",
      workflows: [deaf.id],
      limit: 1,
      leaseMs: LEASE_MS,
    });
    expect(claimed.map((c) => c.run.id)).toEqual(["r"]);
  });
});
