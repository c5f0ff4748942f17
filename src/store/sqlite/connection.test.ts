// Grouped writes (Connection.writeGrouped): the writes asked for in one turn share one
// transaction, each undone alone when it throws, and none answered as written when the
// transaction as a whole fails.

import {
  closeSync,
  existsSync,
  fdatasync,
  fdatasyncSync,
  mkdtempSync,
  openSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CairnError, StoreError } from "../../errors.js";
import { realClock } from "../../lib/clock.js";
import type { StoreHint } from "../store.js";
import { Connection } from "./connection.js";
import type { WriteTx } from "./sql.js";
import type { SyncCalls } from "./wal-sync.js";

describe("Connection.writeGrouped", () => {
  let dir: string;
  let conn: Connection;
  let hints: StoreHint[];
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "cairn-grouped-"));
    hints = [];
    conn = new Connection(join(dir, "g.db"), { synchronous: "full", busyTimeoutMs: 1000 }, (h) =>
      hints.push(h),
    );
    conn.open(realClock);
  });
  afterEach(() => {
    conn.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const insertEvent = (tx: WriteTx, runId: string) =>
    tx
      .prepare(
        "INSERT INTO events (run_id, name, payload, created_at, consumed_by) VALUES (?, 'e', 'p', 0, NULL)",
      )
      .run(runId);
  const eventRuns = () =>
    conn.read("test", (tx) =>
      (tx.prepare("SELECT run_id FROM events ORDER BY seq").all() as Array<{ run_id: string }>).map(
        (r) => r.run_id,
      ),
    );

  it("writes asked for in one turn share one transaction; each is answered with its own value", async () => {
    const write = vi.spyOn(conn, "write");
    const answers = await Promise.all(
      ["a", "b", "c"].map((id) =>
        conn.writeGrouped("test", (tx) => {
          insertEvent(tx, id);
          tx.hint({ kind: "runnable", runId: id });
          return `wrote ${id}`;
        }),
      ),
    );
    expect(answers).toEqual(["wrote a", "wrote b", "wrote c"]);
    expect(write).toHaveBeenCalledTimes(1);
    expect(await eventRuns()).toEqual(["a", "b", "c"]);
    expect(hints.map((h) => h.runId)).toEqual(["a", "b", "c"]);
  });

  it("a write that throws is undone alone and gets its own error (a driver error names the file); its hints are dropped", async () => {
    const failing = (kind: "cairn" | "driver") =>
      conn.writeGrouped(`failing-${kind}`, (tx) => {
        insertEvent(tx, `bad-${kind}`);
        tx.hint({ kind: "runnable", runId: `bad-${kind}` });
        if (kind === "cairn") throw new StoreError("refused on purpose");
        tx.prepare("INSERT INTO no_such_table VALUES (1)").run();
      });
    const results = await Promise.allSettled([
      conn.writeGrouped("ok", (tx) => insertEvent(tx, "first")),
      failing("cairn"),
      failing("driver"),
      conn.writeGrouped("ok", (tx) => {
        insertEvent(tx, "last");
        tx.hint({ kind: "finished", runId: "last" });
      }),
    ]);
    expect(results.map((r) => r.status)).toEqual([
      "fulfilled",
      "rejected",
      "rejected",
      "fulfilled",
    ]);
    const cairn = (results[1] as PromiseRejectedResult).reason as Error;
    expect(cairn).toBeInstanceOf(StoreError);
    expect(cairn.message).toBe("refused on purpose");
    const driver = (results[2] as PromiseRejectedResult).reason as Error;
    expect(driver).toBeInstanceOf(CairnError);
    expect(driver.message).toContain(`SQLite store "${join(dir, "g.db")}": failing-driver failed`);
    expect(await eventRuns()).toEqual(["first", "last"]);
    expect(hints).toEqual([{ kind: "finished", runId: "last" }]);
  });

  it("when the transaction itself ends, no write of the group lands or is answered as written", async () => {
    const results = await Promise.allSettled([
      conn.writeGrouped("ok", (tx) => insertEvent(tx, "before")),
      conn.writeGrouped("ends-it", (tx) => {
        // As SQLite does on a full disk or an I/O error: the whole transaction is gone.
        tx.prepare("ROLLBACK").run();
        throw new Error("disk full");
      }),
      conn.writeGrouped("ok", (tx) => insertEvent(tx, "after")),
    ]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected", "rejected"]);
    expect(await eventRuns()).toEqual([]);
    // The connection is usable afterwards.
    await conn.writeGrouped("ok", (tx) => insertEvent(tx, "later"));
    expect(await eventRuns()).toEqual(["later"]);
  });

  it("close() writes what was asked for before it", async () => {
    const written = conn.writeGrouped("ok", (tx) => insertEvent(tx, "before-close"));
    conn.close();
    await written;
    conn.open(realClock);
    expect(await eventRuns()).toEqual(["before-close"]);
  });

  it("a write asked for after close() is refused at once, even if the store is opened again in the same turn", async () => {
    conn.close();
    const refused = conn.writeGrouped("ok", (tx) => insertEvent(tx, "after-close"));
    conn.open(realClock);
    await expect(refused).rejects.toThrow(StoreError);
    await expect(refused).rejects.toThrow(/not open/);
    await conn.writeGrouped("ok", (tx) => insertEvent(tx, "after-reopen"));
    expect(await eventRuns()).toEqual(["after-reopen"]);
  });
});

describe("Connection.writeGrouped under fake timers", () => {
  afterEach(() => vi.useRealTimers());

  it("a grouped write asked for under fake timers lands, and later ones are not held back", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-grouped-fake-"));
    const conn = new Connection(
      join(dir, "g.db"),
      { synchronous: "full", busyTimeoutMs: 1000 },
      () => {},
    );
    conn.open(realClock);
    try {
      vi.useFakeTimers();
      const first = conn.writeGrouped("fake", () => "first");
      vi.useRealTimers();
      const later = await Promise.race([
        conn.writeGrouped("real", () => "later"),
        new Promise((r) => setTimeout(() => r("still pending after 1 s"), 1000)),
      ]);
      expect(await first).toBe("first");
      expect(later).toBe("later");
    } finally {
      conn.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('Connection durability ("full" on a file: cairn syncs the WAL itself)', () => {
  /** The real file calls, logged; thread-pool syncs can be held back. */
  function watchedCalls() {
    const log: string[] = [];
    let hold: Array<() => void> | undefined;
    const calls: SyncCalls = {
      exists: (p) => existsSync(p),
      open: (p) => {
        log.push(`open ${p.endsWith("-wal") ? "wal" : p}`);
        return openSync(p, "r");
      },
      syncNow: (fd) => {
        log.push("sync-now");
        fdatasyncSync(fd);
      },
      syncLater: (fd, done) => {
        log.push("sync-later");
        const go = () => fdatasync(fd, done);
        if (hold) hold.push(go);
        else go();
      },
      close: (fd) => closeSync(fd),
    };
    return {
      calls,
      log,
      holdSyncs: () => {
        hold = [];
      },
      releaseSyncs: () => {
        const held = hold ?? [];
        hold = undefined;
        for (const go of held) go();
      },
    };
  }

  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "cairn-durable-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const insert = (tx: WriteTx, runId: string) => {
    tx.prepare(
      "INSERT INTO events (run_id, name, payload, created_at, consumed_by) VALUES (?, 'e', 'p', 0, NULL)",
    ).run(runId);
    tx.hint({ kind: "runnable", runId });
  };

  it("runs SQLite at NORMAL and syncs the WAL after each commit, before answering it", async () => {
    const w = watchedCalls();
    const conn = new Connection(
      join(dir, "d.db"),
      { synchronous: "full", busyTimeoutMs: 1000, syncCalls: w.calls },
      () => w.log.push("hint"),
    );
    conn.open(realClock);
    try {
      expect(conn.pragma("synchronous")).toBe(1);
      await conn.write("test", (tx) => {
        insert(tx, "a");
        w.log.push("commit");
      });
      await conn.write("test", (tx) => insert(tx, "b"));
      expect(w.log).toEqual(["commit", "open wal", "sync-now", "hint", "sync-now", "hint"]);
    } finally {
      conn.close();
    }
  });

  it("writers that overlap share syncs on the thread pool; none is answered, nor its hint emitted, before a sync that began after its commit", async () => {
    const w = watchedCalls();
    const hinted: string[] = [];
    const conn = new Connection(
      join(dir, "d.db"),
      { synchronous: "full", busyTimeoutMs: 1000, syncCalls: w.calls },
      (h) => hinted.push(h.runId ?? ""),
    );
    conn.open(realClock);
    try {
      const answered: string[] = [];
      const writer = async (id: number) => {
        for (let i = 0; i < 20; i++) {
          const key = `w${id}-${i}`;
          await conn.write("test", (tx) => insert(tx, key));
          answered.push(key);
        }
      };
      await Promise.all(Array.from({ length: 8 }, (_, id) => writer(id)));
      expect(answered).toHaveLength(160);
      const later = w.log.filter((l) => l === "sync-later").length;
      expect(later).toBeGreaterThan(0);
      // Overlapped syncs cover several commits each.
      expect(w.log.filter((l) => l.startsWith("sync")).length).toBeLessThan(160);

      // Held syncs: commits land, but nothing is answered or hinted until the sync ends.
      w.holdSyncs();
      hinted.length = 0;
      let done = false;
      const pending = conn
        .write("test", (tx) => insert(tx, "held"))
        .then(() => {
          done = true;
        });
      await new Promise((r) => setTimeout(r, 20));
      expect(done).toBe(false);
      expect(hinted).toEqual([]);
      w.releaseSyncs();
      await pending;
      expect(hinted).toEqual(["held"]);
    } finally {
      conn.close();
    }
  });

  it("a failed sync refuses that write and every later one, naming the file and saying to restart", async () => {
    const w = watchedCalls();
    let fail = false;
    const calls: SyncCalls = {
      ...w.calls,
      syncNow: (fd) => {
        if (fail) throw Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO" });
        w.calls.syncNow(fd);
      },
    };
    const path = join(dir, "d.db");
    const conn = new Connection(
      path,
      { synchronous: "full", busyTimeoutMs: 1000, syncCalls: calls },
      () => {},
    );
    conn.open(realClock);
    try {
      await conn.write("test", (tx) => insert(tx, "a"));
      fail = true;
      const err = await conn.write("test", (tx) => insert(tx, "b")).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreError);
      expect(String((err as Error).message)).toContain(path);
      expect(String((err as Error).message)).toContain("restart the process");
      fail = false;
      await expect(conn.write("test", (tx) => insert(tx, "c"))).rejects.toBe(err);
    } finally {
      conn.close();
    }
  });

  it('"normal" and ":memory:" stores do not sync', async () => {
    for (const [path, synchronous] of [
      [join(dir, "n.db"), "normal"],
      [":memory:", "full"],
    ] as const) {
      const w = watchedCalls();
      const conn = new Connection(
        path,
        { synchronous, busyTimeoutMs: 1000, syncCalls: w.calls },
        () => {},
      );
      conn.open(realClock);
      await conn.write("test", (tx) => insert(tx, "a"));
      expect(await conn.syncNow()).toBeUndefined();
      conn.close();
      expect(w.log).toEqual([]);
    }
  });
});
