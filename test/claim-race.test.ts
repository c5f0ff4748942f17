// Two stores (two connections, as two worker processes have) claiming the same runs at
// once, round after round, from runs_ready_idle (SQLite migration 17, PostgreSQL 26): runs
// ready now, runs whose ready_at is an hour off, runs waiting for an event (some sent it),
// runs handed back and claimed again, runs whose lease ran out. No run is claimed twice at
// one epoch, none before its time, none left behind. On both backends.

import { describe, expect, it } from "vitest";
import type { ClaimedRun, Store } from "../src/store/store.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

const WF = ["alpha@1"];
const LEASE_MS = 30_000;
const HOUR = 3_600_000;

describe.each(BACKENDS)("two claimers at once (%s)", (backend) => {
  const harness = useHarness(backend);

  it("each run is claimed once per epoch, none before its ready time, none starved", async () => {
    const h = harness();
    const a = h.store();
    const b = h.store();
    await a.open({ clock: h.clock });
    await b.open({ clock: h.clock });
    h.onCleanup?.(async () => {
      await a.close();
      await b.close();
    });
    const mk = (id: string) =>
      a.createRun({ id, workflow: "alpha", version: "1", input: "null", budgetLimit: {} });
    const ready = Array.from({ length: 40 }, (_, i) => `run_ready_${i}`);
    const later = Array.from({ length: 15 }, (_, i) => `run_later_${i}`);
    const waits = Array.from({ length: 10 }, (_, i) => `run_wait_${i}`);
    for (const id of [...ready, ...later, ...waits]) await mk(id);

    // Park the later ones and the waiting ones: claimed once, released.
    const parked = await claimAll(a);
    expect(parked.map((c) => c.run.id).sort()).toEqual([...ready, ...later, ...waits].sort());
    const seen = new Map<string, number[]>();
    const note = (cs: ClaimedRun[]) => {
      for (const c of cs) seen.set(c.run.id, [...(seen.get(c.run.id) ?? []), c.run.epoch]);
    };
    note(parked);
    const now = h.clock.now();
    for (const c of parked) {
      const id = c.run.id;
      if (later.includes(id)) {
        await a.releaseRun({
          runId: id,
          epoch: c.run.epoch,
          status: "waiting",
          readyAt: now + HOUR,
          wakeAt: now + HOUR,
        });
      } else if (waits.includes(id)) {
        await a.releaseRun({
          runId: id,
          epoch: c.run.epoch,
          status: "waiting",
          readyAt: null,
          waitingFor: ["go"],
        });
      } else {
        // A ready run claimed in the parking round: handed back at once.
        await a.releaseRun({ runId: id, epoch: c.run.epoch, status: "pending", readyAt: now });
      }
    }
    for (const id of waits.slice(0, 5)) await b.sendEvent({ runId: id, name: "go", payload: "1" });

    // Both claim at once, small pages, until a round finds nothing; each hands back a third
    // of what it took, to be claimed again.
    let rounds = 0;
    for (;;) {
      rounds++;
      const [x, y] = await Promise.all([claim(a, "w-a"), claim(b, "w-b")]);
      note(x);
      note(y);
      if (x.length === 0 && y.length === 0) break;
      if (rounds > 200) throw new Error("claims never ran dry");
      const back = [...x, ...y].filter((_, i) => i % 3 === 0 && rounds < 6);
      await Promise.all(
        back.map((c) =>
          (c.run.leaseOwner === "w-a" ? a : b).releaseRun({
            runId: c.run.id,
            epoch: c.run.epoch,
            status: "pending",
            readyAt: h.clock.now(),
          }),
        ),
      );
    }
    const claimedNow = [...seen.keys()].filter(
      (id) => (seen.get(id)?.length ?? 0) > (parked.some((p) => p.run.id === id) ? 1 : 0),
    );
    expect(claimedNow.sort()).toEqual([...ready, ...waits.slice(0, 5)].sort());
    for (const [id, epochs] of seen) {
      // Epochs strictly increasing by one: never the same epoch twice.
      expect(epochs, id).toEqual(epochs.map((_, i) => epochs[0]! + i));
    }

    // An hour on: the later ones, and the leases that ran out (every run claimed above and
    // not handed back), are claimed once each by one of the two.
    await h.clock.advance(HOUR);
    const before = new Map([...seen].map(([id, e]) => [id, e.length]));
    for (;;) {
      const [x, y] = await Promise.all([claim(a, "w-a"), claim(b, "w-b")]);
      note(x);
      note(y);
      if (x.length === 0 && y.length === 0) break;
    }
    const again = [...seen.keys()].filter(
      (id) => (seen.get(id)?.length ?? 0) > (before.get(id) ?? 0),
    );
    expect(again.sort()).toEqual([...ready, ...later, ...waits.slice(0, 5)].sort());
    for (const [id, epochs] of seen) {
      expect(epochs, id).toEqual(epochs.map((_, i) => epochs[0]! + i));
    }
    for (const id of waits.slice(5)) expect((await a.getRun(id))?.status, id).toBe("waiting");
  });
});

function claim(store: Store, workerId: string): Promise<ClaimedRun[]> {
  return store.claimRuns({ workerId, workflows: WF, limit: 4, leaseMs: LEASE_MS });
}

async function claimAll(store: Store): Promise<ClaimedRun[]> {
  const out: ClaimedRun[] = [];
  for (;;) {
    const got = await store.claimRuns({
      workerId: "w-park",
      workflows: WF,
      limit: 100,
      leaseMs: LEASE_MS,
    });
    if (got.length === 0) return out;
    out.push(...got);
  }
}
