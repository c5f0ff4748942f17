// Recovering the runs of dead workers on this host: a worker row whose process is
// gone is removed, so its runs are taken over at once instead of after their leases. The pid
// is trusted only when the row's PID namespace is ours: a container on host networking has
// the same hostname, and its live worker's pid may be a dead pid here. And the check runs on
// every heartbeat, not only at start, so a worker already running takes over promptly.

import { spawn } from "node:child_process";
import { hostname } from "node:os";
import { describe, expect, it } from "vitest";
import { type Store, workflow } from "../src/index.js";
import { pidNamespace } from "../src/lib/process-identity.js";
import { BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const LEASE_MS = 60_000;
const HEARTBEAT_MS = 1_000;

const wf = workflow({ name: "recoverable", version: "1" }, async (ctx) =>
  ctx.step("work", () => "done"),
);

/** A process of our own, alive until `kill` resolves (it waits for the exit). */
function liveProcess(): { pid: number; kill: () => Promise<void> } {
  const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], {
    stdio: "ignore",
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  return {
    pid: child.pid!,
    kill: async () => {
      child.kill("SIGKILL");
      await exited;
    },
  };
}

async function deadPid(): Promise<number> {
  const p = liveProcess();
  await p.kill();
  return p.pid;
}

/** A store that counts markUnserved calls: each ends a heartbeat's sweep of worker rows. */
function counting(inner: Store): { store: Store; sweeps: () => number } {
  let n = 0;
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      // Called on the store itself: its private fields are not the proxy's.
      if (prop !== "markUnserved") return value.bind(target);
      return async (...args: unknown[]) => {
        const out = await (value as (...a: unknown[]) => Promise<number>).apply(target, args);
        n++;
        return out;
      };
    },
  });
  return { store, sweeps: () => n };
}

/** A run leased to a worker row that some other process (the "fake" worker) holds. */
async function leasedToFake(
  h: Harness,
  fake: { id: string; pid: number; pidNamespace: string | null },
): Promise<{ runId: string; side: Store }> {
  const side = h.store();
  await side.open({ clock: h.clock });
  await side.registerWorker({ ...fake, host: hostname(), workflows: [wf.id] });
  await side.createRun({
    id: "r",
    workflow: wf.name,
    version: wf.version,
    input: "[null]",
    budgetLimit: {},
  });
  const claimed = await side.claimRuns({
    workerId: fake.id,
    workflows: [wf.id],
    limit: 1,
    leaseMs: LEASE_MS,
  });
  expect(claimed.map((c) => c.run.id)).toEqual(["r"]);
  return { runId: "r", side };
}

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);
  const ns = pidNamespace();

  it.skipIf(ns === null)(
    "same PID namespace: a worker that dies while we run is recovered at our next heartbeat",
    async () => {
      const h = harness();
      const proc = liveProcess();
      try {
        const { runId, side } = await leasedToFake(h, {
          id: "wrk_fake",
          pid: proc.pid,
          pidNamespace: ns,
        });
        const e = h.engine([wf], { leaseMs: LEASE_MS, heartbeatMs: HEARTBEAT_MS });
        // Alive at our start: left alone.
        await e.listRuns();
        expect((await side.getRun(runId))?.leaseOwner).toBe("wrk_fake");
        await proc.kill();
        await h.clock.advance(HEARTBEAT_MS);
        // Taken over long before its lease (60 s) ran out: we moved 1 s.
        expect(await within(e.handle(runId).result(), 30_000, "the run")).toBe("done");
        expect((await side.listWorkers()).map((w) => w.id)).not.toContain("wrk_fake");
        await side.close();
      } finally {
        await proc.kill();
      }
    },
  );

  it.skipIf(ns === null)(
    "another PID namespace: a pid that is dead here is not taken for a dead worker",
    async () => {
      const h = harness();
      const other = "linux:another-container:pidns:1";
      const { runId, side } = await leasedToFake(h, {
        id: "wrk_container",
        pid: await deadPid(),
        pidNamespace: other,
      });
      const { store, sweeps } = counting(h.store());
      const e = h.engine([wf], { store, leaseMs: LEASE_MS, heartbeatMs: HEARTBEAT_MS });
      await e.listRuns();
      for (let i = 0; i < 3; i++) {
        const before = sweeps();
        await h.clock.advance(HEARTBEAT_MS);
        await until(() => sweeps() > before, "a heartbeat's sweep");
      }
      const run = await side.getRun(runId);
      expect(run?.status).toBe("running");
      expect(run?.leaseOwner).toBe("wrk_container");
      expect((await side.listWorkers()).map((w) => w.id)).toContain("wrk_container");
      // Its heartbeat grows older than a lease (and its lease runs out): now it is gone.
      await h.clock.advance(LEASE_MS);
      expect(await within(e.handle(runId).result(), 30_000, "the run")).toBe("done");
      await until(
        async () => !(await side.listWorkers()).some((w) => w.id === "wrk_container"),
        "the stale row to be removed",
      );
      await side.close();
    },
  );
});
