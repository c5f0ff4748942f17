// WalSync: no commit is answered before an fdatasync that began after it has finished;
// runs that overlap get their syncs on the thread pool, a lone run inline; a failed sync
// stops the store; close() answers what waits and closes the file only once no sync uses it.

import { describe, expect, it } from "vitest";
import { type SyncCalls, WalSync } from "./wal-sync.js";

/** Fake file calls: inline syncs happen at once; thread-pool syncs wait for `finish()`. */
function fakeCalls(opts: { walExists?: boolean } = {}) {
  const log: string[] = [];
  const later: Array<(err: Error | null) => void> = [];
  let failNext: Error | undefined;
  const calls: SyncCalls = {
    exists: () => opts.walExists ?? true,
    open: () => {
      log.push("open");
      return 7;
    },
    syncNow: () => {
      log.push("sync-now");
      if (failNext) throw failNext;
    },
    syncLater: (_fd, done) => {
      log.push("sync-later");
      later.push(done);
    },
    close: () => {
      log.push("close");
    },
  };
  return {
    calls,
    log,
    pending: () => later.length,
    /** Finishes the oldest thread-pool sync (with `err`, if given). */
    finish: async (err: Error | null = null) => {
      const done = later.shift();
      if (!done) throw new Error("no sync in flight");
      done(err);
      await flush();
    },
    failNextInline: (err: Error) => {
      failNext = err;
    },
  };
}

const flush = () => new Promise<void>((r) => setImmediate(r));
const failure = (err: unknown) => new Error(`store stopped: ${(err as Error).message}`);

/** Tracks whether a promise has settled, and how. */
function watch(p: Promise<void> | undefined) {
  const state = { settled: p === undefined, error: undefined as unknown };
  p?.then(
    () => {
      state.settled = true;
    },
    (err: unknown) => {
      state.settled = true;
      state.error = err;
    },
  );
  return state;
}

describe("WalSync", () => {
  it("syncs a lone writer's commits inline, each before it is answered", () => {
    const f = fakeCalls();
    const sync = new WalSync("x-wal", failure, f.calls);
    for (let i = 0; i < 5; i++) expect(sync.committed()).toBeUndefined();
    expect(f.log).toEqual(["open", ...Array(5).fill("sync-now")]);
  });

  it("probes on the thread pool; commits made meanwhile wait for a sync that began after them, and switch to overlapped syncs", async () => {
    const f = fakeCalls();
    const sync = new WalSync("x-wal", failure, f.calls);
    for (let i = 0; i < 31; i++) expect(sync.committed()).toBeUndefined();
    const probe = watch(sync.committed()); // the 32nd: a probe
    expect(f.pending()).toBe(1);
    const during = [watch(sync.committed()), watch(sync.committed())];
    await flush();
    expect(probe.settled).toBe(false);
    await f.finish();
    expect(probe.settled).toBe(true);
    // The probe's sync began before these commits: it does not cover them.
    expect(during.map((d) => d.settled)).toEqual([false, false]);
    expect(f.pending()).toBe(1); // the next sync began at once
    const afterStart = watch(sync.committed());
    await f.finish();
    expect(during.map((d) => d.settled)).toEqual([true, true]);
    expect(afterStart.settled).toBe(false);
    await f.finish();
    expect(afterStart.settled).toBe(true);
    // Overlapped now: the next commit is not synced inline.
    const next = watch(sync.committed());
    expect(f.pending()).toBe(1);
    expect(next.settled).toBe(false);
    await f.finish();
    expect(next.settled).toBe(true);
  });

  it("goes back to inline syncs after calm overlapped ones", async () => {
    const f = fakeCalls();
    const sync = new WalSync("x-wal", failure, f.calls);
    for (let i = 0; i < 31; i++) sync.committed();
    sync.committed();
    sync.committed(); // arrives during the probe: overlapped
    await f.finish();
    await f.finish(); // no commit arrived during this one: calm 1 of 4
    for (let i = 0; i < 3; i++) {
      const c = watch(sync.committed());
      await f.finish();
      expect(c.settled).toBe(true);
    }
    const inlineCount = f.log.filter((l) => l === "sync-now").length;
    expect(sync.committed()).toBeUndefined();
    expect(f.log.filter((l) => l === "sync-now").length).toBe(inlineCount + 1);
  });

  it("a failed sync rejects what waits on it and refuses every later write", async () => {
    const f = fakeCalls();
    const sync = new WalSync("x-wal", failure, f.calls);
    for (let i = 0; i < 31; i++) sync.committed();
    const a = watch(sync.committed());
    const b = watch(sync.committed());
    await f.finish(new Error("EIO"));
    expect(a.error).toBeInstanceOf(Error);
    expect(String(a.error)).toContain("store stopped: EIO");
    expect(b.error).toBe(a.error);
    expect(() => sync.assertUsable()).toThrow("store stopped: EIO");
    expect(() => sync.committed()).toThrow("store stopped: EIO");
    await expect(sync.syncNow()).rejects.toThrow("store stopped: EIO");
  });

  it("a failed inline sync throws from committed() and stops the store", () => {
    const f = fakeCalls();
    const sync = new WalSync("x-wal", failure, f.calls);
    f.failNextInline(new Error("EIO"));
    expect(() => sync.committed()).toThrow("store stopped: EIO");
    expect(() => sync.assertUsable()).toThrow("store stopped: EIO");
  });

  it("close() answers waiting commits with an inline sync and closes the file only after the sync in flight ends", async () => {
    const f = fakeCalls();
    const sync = new WalSync("x-wal", failure, f.calls);
    for (let i = 0; i < 31; i++) sync.committed();
    const inFlight = watch(sync.committed());
    const queued = watch(sync.committed());
    sync.close();
    await flush();
    expect(queued.settled).toBe(true);
    expect(queued.error).toBeUndefined();
    expect(f.log).not.toContain("close");
    await f.finish();
    expect(inFlight.settled).toBe(true);
    expect(f.log.at(-1)).toBe("close");
  });

  it("syncNow waits for a sync that begins after it, and needs none without a WAL file", async () => {
    const f = fakeCalls();
    const sync = new WalSync("x-wal", failure, f.calls);
    await sync.syncNow();
    expect(f.log).toEqual(["open", "sync-now"]);
    for (let i = 0; i < 31; i++) sync.committed();
    sync.committed(); // a probe in flight
    const read = watch(sync.syncNow());
    await f.finish();
    expect(read.settled).toBe(false);
    await f.finish();
    expect(read.settled).toBe(true);

    const none = fakeCalls({ walExists: false });
    await new WalSync("y-wal", failure, none.calls).syncNow();
    expect(none.log).toEqual([]);
  });
});
