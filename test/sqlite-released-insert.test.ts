// SQLite's createReleasedRun writes a run that ended before it needed a record in ONE
// statement: inserted as its release leaves it (run-control.ts insertReleasedRun), where it
// was inserted claimed, read back and updated. The run must be stored exactly as that older
// path (createRun claimed, then releaseRun under its first epoch) leaves it, for every kind
// of release: every column of its row, the events it sends, the hints subscribers hear, and
// the record the store answers with. An id already taken is left untouched.

import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { sqliteStore } from "../src/index.js";
import type { NewRun, RunEnd, StoreHint } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function openStore() {
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  const clock = createVirtualClock(1_700_000_000_000);
  const store = sqliteStore(db.path);
  await store.open({ clock });
  cleanups.push(() => store.close());
  const hints: StoreHint[] = [];
  store.subscribe((h) => hints.push(h));
  // A parent to receive the events a release sends (a child's end).
  await store.createRun({
    id: "run_parent",
    workflow: "parent",
    version: "1",
    input: "null",
    budgetLimit: {},
  });
  hints.length = 0;
  /** The committed rows of `table` for `runId`, every column, read by another connection. */
  const rows = (table: "runs" | "events", runId: string): unknown[] => {
    const conn = new Database(db.path, { readonly: true, fileMustExist: true });
    try {
      const col = table === "runs" ? "id" : "run_id";
      return conn.prepare(`SELECT * FROM ${table} WHERE ${col} = ? ORDER BY rowid`).all(runId);
    } finally {
      conn.close();
    }
  };
  return { store, clock, hints, rows };
}

const newRun: NewRun & { claimBy: { workerId: string; leaseMs: number } } = {
  id: "run_folded",
  workflow: "wf",
  version: "3",
  input: '{"n":1}',
  budgetLimit: { usd: 2, tokens: 10 },
  parentId: null,
  traceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
  claimBy: { workerId: "wk_1", leaseMs: 30_000 },
};

const ends: Array<[string, RunEnd]> = [
  ["completed", { status: "completed", readyAt: null, output: '{"doubled":2}' }],
  [
    "failed, naming its calls",
    {
      status: "failed",
      reason: "boom",
      readyAt: null,
      error: { name: "TypeError", message: "boom", code: "E_X", stack: "TypeError: boom" },
      failedKeys: ["a", "b#2"],
    },
  ],
  ["canceled", { status: "canceled", reason: "stop", readyAt: null }],
  [
    "paused, a crash unjudged, held for a body",
    {
      status: "paused",
      reason: "budget",
      pausedFor: "budget",
      readyAt: null,
      crashUnjudged: true,
      heldFor: { workerId: "wk_1", ms: 5_000 },
    },
  ],
  [
    "waiting on a timer and events",
    {
      status: "waiting",
      readyAt: 1_700_000_060_000,
      wakeAt: 1_700_000_060_000,
      waitingFor: ["go", "stop"],
    },
  ],
  ["pending, ready now", { status: "pending", readyAt: 1_700_000_000_000 }],
  [
    "completed, sending its parent an event",
    {
      status: "completed",
      readyAt: null,
      output: "1",
      events: [{ runId: "run_parent", name: "cairn.child:x", payload: '{"ok":1}' }],
    },
  ],
];

describe("createReleasedRun inserts a released run as createRun and releaseRun leave it", () => {
  for (const [what, end] of ends) {
    it(what, async () => {
      const folded = await openStore();
      const made = await folded.store.createReleasedRun!(newRun, () => end);
      expect(made.created).toBe(true);

      const twoSteps = await openStore();
      const created = await twoSteps.store.createRun(newRun);
      expect(created.created).toBe(true);
      const released = await twoSteps.store.releaseRun({
        ...end,
        runId: newRun.id,
        epoch: created.run.epoch,
      });
      if (!released.ok) throw new Error("the release of the reference run was refused");

      expect(folded.rows("runs", newRun.id)).toEqual(twoSteps.rows("runs", newRun.id));
      expect(folded.rows("events", "run_parent")).toEqual(twoSteps.rows("events", "run_parent"));
      expect(made.run).toEqual(released.run);
      expect(folded.hints).toEqual(twoSteps.hints);
    });
  }

  it("leaves a run under an id already taken untouched, and says it was not created", async () => {
    const s = await openStore();
    await s.store.createRun({ ...newRun, claimBy: undefined });
    const before = s.rows("runs", newRun.id);
    s.hints.length = 0;
    const made = await s.store.createReleasedRun!(newRun, () => ({
      status: "completed",
      readyAt: null,
      output: "2",
      events: [{ runId: "run_parent", name: "cairn.child:y", payload: "2" }],
    }));
    expect(made.created).toBe(false);
    expect(made.run.status).toBe("pending");
    expect(s.rows("runs", newRun.id)).toEqual(before);
    expect(s.rows("events", "run_parent")).toEqual([]);
    expect(s.hints).toEqual([]);
  });
});
