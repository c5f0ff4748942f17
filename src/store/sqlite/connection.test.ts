// Grouped writes (Connection.writeGrouped): the writes asked for in one turn share one
// transaction, each undone alone when it throws, and none answered as written when the
// transaction as a whole fails.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CairnError, StoreError } from "../../errors.js";
import { realClock } from "../../lib/clock.js";
import type { StoreHint } from "../store.js";
import { Connection } from "./connection.js";
import type { WriteTx } from "./sql.js";

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

  it("a write alone in its turn is one transaction of its own: a throw undoes all of it and gets its own error, hints dropped", async () => {
    const write = vi.spyOn(conn, "write");
    const lone = (kind: "cairn" | "driver" | "ends-it") =>
      conn.writeGrouped(`lone-${kind}`, (tx) => {
        insertEvent(tx, `${kind}-1`);
        insertEvent(tx, `${kind}-2`);
        tx.hint({ kind: "runnable", runId: kind });
        if (kind === "cairn") throw new StoreError("refused on purpose");
        if (kind === "ends-it") tx.prepare("ROLLBACK").run();
        tx.prepare("INSERT INTO no_such_table VALUES (1)").run();
      });
    await expect(lone("cairn")).rejects.toThrow(/^refused on purpose$/);
    await expect(lone("driver")).rejects.toThrow(
      `SQLite store "${join(dir, "g.db")}": lone-driver failed`,
    );
    await expect(lone("ends-it")).rejects.toBeInstanceOf(CairnError);
    expect(write).toHaveBeenCalledTimes(3);
    expect(await eventRuns()).toEqual([]);
    expect(hints).toEqual([]);
    // A nested savepoint inside it still undoes only its own part, and the write lands.
    const answer = await conn.writeGrouped("lone-ok", (tx) => {
      insertEvent(tx, "kept");
      try {
        tx.savepoint(() => {
          insertEvent(tx, "undone");
          throw new Error("inner");
        })(undefined);
      } catch {}
      tx.hint({ kind: "finished", runId: "kept" });
      return "wrote";
    });
    expect(answer).toBe("wrote");
    expect(await eventRuns()).toEqual(["kept"]);
    expect(hints).toEqual([{ kind: "finished", runId: "kept" }]);
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
