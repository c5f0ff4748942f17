// SQLite's release builds the record it answers from the row it read and its UPDATE's values
// (run-control.ts, releaseInTx, 012c70e) where the UPDATE returned the row. Attacked here: for
// every kind of release (completed with output, failed with an error and failed keys,
// canceled by a pending cancel request with its events-if-canceled, waiting with a timer and
// an awaited event already there, waiting on events alone, handed back pending, paused for
// budget with crashUnjudged, held for a body, events sent to another run and to itself,
// fractional times), the record the release answers is the run as stored, field by field
// (what RETURNING gave), and what listRuns reads.

import { afterEach, describe, expect, it } from "vitest";
import { sqliteStore } from "../src/index.js";
import type { Release, Store } from "../src/store/store.js";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Variant = Omit<Release, "runId" | "epoch"> & { cancelFirst?: boolean; eventFirst?: string };

const variants: Record<string, (id: string) => Variant> = {
  completed: () => ({ status: "completed", readyAt: null, output: '"done\\u0000 é"' }),
  failed: () => ({
    status: "failed",
    readyAt: null,
    reason: "boom\u0000 reason",
    error: { name: "Error", message: "it broke", stack: "Error: it broke\n  at x" },
    failedKeys: ["a", "b"],
    heldFor: { workerId: "w", ms: 5_000 },
  }),
  canceledByRequest: (id) => ({
    status: "waiting",
    readyAt: 9_999,
    waitingFor: ["go"],
    cancelFirst: true,
    eventsIfCanceled: [{ runId: "parent", name: `cairn.child:${id}`, payload: '"canceled"' }],
  }),
  waitingTimerAndEventThere: () => ({
    status: "waiting",
    readyAt: 50_000.5,
    wakeAt: 50_000.5,
    waitingFor: ["go", "stop"],
    eventFirst: "go",
  }),
  waitingEventsOnly: () => ({ status: "waiting", readyAt: null, waitingFor: ["go"] }),
  handedBack: () => ({ status: "pending", readyAt: 1_000 }),
  pausedForBudget: () => ({
    status: "paused",
    readyAt: null,
    pausedFor: "budget",
    reason: "budget tokens: 10 of 10 spent",
    crashUnjudged: true,
    heldFor: { workerId: "w", ms: 0.25 },
  }),
  eventsToParentAndSelf: (id) => ({
    status: "waiting",
    readyAt: null,
    waitingFor: ["self"],
    events: [
      { runId: "parent", name: `cairn.child:${id}`, payload: '"x"' },
      { runId: id, name: "self", payload: '"me"' },
    ],
  }),
  canceledWithSelfEvent: (id) => ({
    status: "pending",
    readyAt: 1_000,
    cancelFirst: true,
    eventsIfCanceled: [{ runId: id, name: "bye", payload: '"me"' }],
  }),
};

/** What each release leaves: [status, readyAt]. */
const expected: Record<string, [string, number | null]> = {
  completed: ["completed", null],
  failed: ["failed", null],
  canceledByRequest: ["canceled", null],
  waitingTimerAndEventThere: ["waiting", 1_000],
  waitingEventsOnly: ["waiting", null],
  handedBack: ["pending", 1_000],
  pausedForBudget: ["paused", null],
  eventsToParentAndSelf: ["waiting", 1_000],
  canceledWithSelfEvent: ["canceled", null],
};

async function openStore(): Promise<Store> {
  const store = sqliteStore(":memory:");
  await store.open({ clock: { now: () => 1_000 } as never });
  cleanups.push(() => store.close());
  // A parent that waits, for the events the releases send it.
  await store.createRun({
    id: "parent",
    workflow: "p",
    version: "1",
    input: "-1",
    budgetLimit: {},
  });
  return store;
}

describe("SQLite: the record a release answers is the run as stored", () => {
  it.each(Object.keys(variants))("%s", async (name) => {
    const store = await openStore();
    const id = `r-${name}`;
    const { run } = await store.createRun({
      id,
      workflow: "wf",
      version: "1",
      input: '"in"',
      budgetLimit: { tokens: 10 },
      parentId: "parent",
      traceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      handedInputDigest: "d1",
      claimBy: { workerId: "w", leaseMs: 60_000 },
    });
    const { cancelFirst, eventFirst, ...rest } = variants[name]!(id);
    if (cancelFirst) {
      expect((await store.requestCancel(id, "stop it")).state).not.toBe("canceled");
    }
    if (eventFirst) await store.sendEvent({ runId: id, name: eventFirst, payload: '"e"' });
    const outcome = await store.releaseRun({ runId: id, epoch: run.epoch, ...rest });
    expect(outcome.ok).toBe(true);
    const answered = outcome.ok ? outcome.run : undefined;
    const stored = await store.getRun(id);
    expect(answered).toStrictEqual(stored);
    expect([stored?.status, stored?.readyAt]).toEqual(expected[name]);
    const listed = (await store.listRuns({})).find((r) => r.id === id);
    expect(listed).toStrictEqual(stored);
  });
});
