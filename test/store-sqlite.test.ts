// The SQLite store: the shared Store contract on a real file in a temp dir, plus what only
// a file has: refusing a newer schema or a corrupted file without touching it, the
// synchronous setting, and several processes writing one file without SQLITE_BUSY.

import { spawn } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { StoreError } from "../src/errors.js";
import { realClock } from "../src/lib/clock.js";
import { MIGRATIONS, SCHEMA_VERSION } from "../src/store/sqlite/migrations/index.js";
import { sqliteStore } from "../src/store/sqlite/sqlite-store.js";
import type { StepRecord } from "../src/store/store.js";
import { createSettableClock, describeStoreContract } from "../src/testing/store-contract.js";

describeStoreContract("sqlite", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cairn-sqlite-contract-"));
  return {
    store: sqliteStore(join(dir, "nested", "cairn.db")),
    clock: createSettableClock(),
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  };
});

describe("sqliteStore (file-specific)", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "cairn-sqlite-"));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  /** A real, closed database file with a little data in it. It is switched back to a
   *  rollback journal: opening it in WAL mode would then rewrite its header, so a refusal
   *  that forgot to check before configuring the connection shows up as changed bytes. */
  async function makeDb(file: string): Promise<void> {
    const store = sqliteStore(file);
    await store.open({ clock: createSettableClock() });
    for (let i = 0; i < 50; i++) {
      await store.createRun({
        id: `run_${i}`,
        workflow: "wf",
        version: "1",
        input: JSON.stringify({ i, pad: "x".repeat(200) }),
        budgetLimit: {},
      });
    }
    await store.close();
    const raw = new Database(file);
    raw.pragma("journal_mode = DELETE");
    raw.close();
  }

  async function expectRefused(file: string, pattern: RegExp): Promise<void> {
    const before = readFileSync(file);
    const store = sqliteStore(file);
    const err = await store.open({ clock: createSettableClock() }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toContain(file);
    expect((err as Error).message).toMatch(pattern);
    expect(readFileSync(file).equals(before)).toBe(true);
    // Refused means refused: the store is not usable afterwards.
    await expect(store.getRun("run_1")).rejects.toBeInstanceOf(StoreError);
  }

  it("creates the parent directory, uses WAL, synchronous FULL and the busy timeout", async () => {
    const file = join(dir, "a", "b", "cairn.db");
    const store = sqliteStore(file);
    await store.open({ clock: realClock });
    expect(existsSync(file)).toBe(true);
    expect(store.pragma("journal_mode")).toBe("wal");
    expect(store.pragma("synchronous")).toBe(2); // FULL
    expect(store.pragma("busy_timeout")).toBe(5000);
    await store.close();
  });

  it("applies synchronous NORMAL and a custom busy timeout when asked", async () => {
    const store = sqliteStore(join(dir, "cairn.db"), {
      synchronous: "normal",
      busyTimeoutMs: 1234,
    });
    await store.open({ clock: realClock });
    expect(store.pragma("synchronous")).toBe(1); // NORMAL
    expect(store.pragma("busy_timeout")).toBe(1234);
    await store.close();
  });

  it("records its schema version and reopens an up-to-date file", async () => {
    const file = join(dir, "cairn.db");
    await makeDb(file);
    const raw = new Database(file, { readonly: true });
    const row = raw.prepare("SELECT MAX(version) AS v FROM schema_version").get() as { v: number };
    raw.close();
    expect(row.v).toBe(SCHEMA_VERSION);
    const store = sqliteStore(file);
    await store.open({ clock: createSettableClock() });
    expect((await store.getRun("run_7"))?.input).toContain('"i":7');
    await store.close();
  });

  it("upgrades a version-1 file in place: its journal stays (as generation 0), and writes go on", async () => {
    const file = join(dir, "v1.db");
    const raw = new Database(file);
    raw.exec(MIGRATIONS[0]!.sql);
    raw.exec(
      "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    );
    raw.prepare("INSERT INTO schema_version VALUES (1, 0)").run();
    raw
      .prepare(
        `INSERT INTO runs VALUES ('run_v1', 'wf', '1', 'running', NULL, NULL, '1', NULL, NULL,
           '{}', '{"usd":0.1}', NULL, 5, NULL, '[]', 'w1', 5, 1, 0, 0, 0, 0)`,
      )
      .run();
    raw
      .prepare(
        `INSERT INTO steps VALUES ('run_v1', 'a', 0, 'a', 'step', 'ok', '1', NULL,
           '{"usd":0.1}', 1, 1, 2)`,
      )
      .run();
    raw.close();
    const store = sqliteStore(file);
    await store.open({ clock: createSettableClock() });
    const legacy: StepRecord = {
      runId: "run_v1",
      key: "a",
      generation: 0,
      seq: 0,
      name: "a",
      kind: "step",
      outcome: "ok",
      result: "1",
      error: null,
      spend: { usd: 0.1 },
      attempt: 1,
      startedAt: 1,
      completedAt: 2,
      delivery: null,
      issuedAfter: null,
      issuedLate: false,
    };
    expect((await store.loadJournal("run_v1")).steps).toEqual([legacy]);
    expect((await store.getRun("run_v1"))?.failedCalls).toEqual([]);
    const next = { ...legacy, key: "b", seq: 1, delivery: 1, issuedAfter: 1, spend: {} };
    expect(await store.appendRecords([{ runId: "run_v1", epoch: 1, steps: [next] }])).toEqual([
      { ok: true },
    ]);
    expect((await store.loadJournal("run_v1")).steps).toEqual([legacy, next]);
    await store.close();
    await store.close();
  });

  it("upgrades a version 3 file in place: worker rows gain an unknown PID namespace", async () => {
    const file = join(dir, "cairn.db");
    await makeDb(file);
    // Back to what version 3 was, with a worker row written by that version.
    const raw = new Database(file);
    raw.exec(
      "DROP TABLE approvals; DROP TABLE workspace_refs; DROP TABLE workspace_objects; " +
        "DROP TABLE rate_limiters; DROP TABLE rate_grants; DROP TABLE run_streams; " +
        "ALTER TABLE workers DROP COLUMN pid_namespace; ALTER TABLE steps DROP COLUMN reconciled; " +
        "ALTER TABLE workers DROP COLUMN lease_ms; DROP TABLE epoch_floor; DROP TABLE store_marks; " +
        "ALTER TABLE runs DROP COLUMN trace_context; ALTER TABLE runs DROP COLUMN crash_unjudged; " +
        "ALTER TABLE runs DROP COLUMN claimed_from; ALTER TABLE runs DROP COLUMN handed_input_digest; " +
        "DROP INDEX runs_held_by; DROP INDEX runs_ready_idle; " +
        "CREATE INDEX runs_created ON runs (created_at, id); " +
        "CREATE INDEX runs_ready ON runs (ready_at) WHERE ready_at IS NOT NULL; " +
        "CREATE INDEX runs_lease_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL; " +
        "ALTER TABLE runs DROP COLUMN held_by; ALTER TABLE runs DROP COLUMN held_until; " +
        "DROP INDEX steps_run_seq_generation; CREATE INDEX steps_run_seq ON steps (run_id, seq); " +
        "DELETE FROM schema_version WHERE version > 3",
    );
    raw
      .prepare(
        "INSERT INTO workers (id, host, pid, workflows, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?)",
      )
      .run("w-old", "h", 7, "[]", 1, 1);
    raw.close();
    const store = sqliteStore(file);
    await store.open({ clock: createSettableClock() });
    expect((await store.listWorkers()).map((w) => [w.id, w.pidNamespace])).toEqual([
      ["w-old", null],
    ]);
    await store.registerWorker({
      id: "w-new",
      host: "h",
      pid: 8,
      pidNamespace: "ns",
      workflows: [],
    });
    expect((await store.listWorkers()).find((w) => w.id === "w-new")?.pidNamespace).toBe("ns");
    expect((await store.getRun("run_7"))?.input).toContain('"i":7');
    await store.close();
    const check = new Database(file, { readonly: true });
    const row = check.prepare("SELECT MAX(version) AS v FROM schema_version").get() as {
      v: number;
    };
    const indexes = check
      .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'steps'")
      .all()
      .map((r) => (r as { name: string }).name);
    // The journal is read in (seq, generation) order from an index, with no sort of its own.
    const plan = check
      .prepare("EXPLAIN QUERY PLAN SELECT * FROM steps WHERE run_id = ? ORDER BY seq, generation")
      .all("run_7")
      .map((r) => (r as { detail: string }).detail);
    check.close();
    expect(row.v).toBe(SCHEMA_VERSION);
    expect(indexes).toContain("steps_run_seq_generation");
    expect(indexes).not.toContain("steps_run_seq");
    expect(plan.join("; ")).toMatch(/USING INDEX steps_run_seq_generation/);
    expect(plan.join("; ")).not.toMatch(/TEMP B-TREE/);
  });

  it("refuses a file with a newer schema version, leaving it byte-identical", async () => {
    const file = join(dir, "cairn.db");
    await makeDb(file);
    const raw = new Database(file);
    raw
      .prepare("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)")
      .run(SCHEMA_VERSION + 1);
    raw.close();
    await expectRefused(file, /schema version .*newer cairn.*Upgrade cairn/s);
  });

  it("refuses a file of garbage bytes, leaving it byte-identical", async () => {
    const file = join(dir, "cairn.db");
    const garbage = Buffer.alloc(64 * 1024);
    for (let i = 0; i < garbage.length; i++) garbage[i] = (i * 7919 + 13) % 251;
    writeFileSync(file, garbage);
    await expectRefused(file, /corrupted/);
  });

  /** Copies a real database and damages the copy with `damage(bytes, pageSize, pages)`. */
  async function damagedCopy(
    damage: (
      bytes: Buffer,
      pageSize: number,
      pages: Array<{ pageno: number; pagetype: string }>,
    ) => void,
  ): Promise<{ original: string; file: string }> {
    const original = join(dir, "original.db");
    await makeDb(original);
    const raw = new Database(original, { readonly: true });
    const pages = raw
      .prepare("SELECT pageno, pagetype FROM dbstat WHERE name = 'runs' ORDER BY pageno")
      .all() as Array<{ pageno: number; pagetype: string }>;
    raw.close();
    const file = join(dir, "copy.db");
    copyFileSync(original, file);
    const bytes = readFileSync(file);
    damage(bytes, bytes.readUInt16BE(16), pages);
    writeFileSync(file, bytes);
    return { original, file };
  }

  it("refuses a real database with a garbled page, leaving it byte-identical", async () => {
    const { original, file } = await damagedCopy((bytes, pageSize, pages) => {
      // The runs table's root page: the schema still reads; SQLite fails on the b-tree.
      const start = (pages[0]!.pageno - 1) * pageSize;
      for (let i = start; i < start + pageSize; i++) bytes[i] = bytes[i]! ^ 0x5a;
    });
    await expectRefused(file, /corrupted/);
    // The undamaged original still opens.
    const store = sqliteStore(original);
    await store.open({ clock: createSettableClock() });
    expect(await store.listRuns()).toHaveLength(50);
    await store.close();
  });

  it("refuses a database with one flipped byte that only quick_check notices", async () => {
    const { file } = await damagedCopy((bytes, pageSize, pages) => {
      // A leaf page's first-freeblock offset: every query still runs, quick_check objects.
      const leaf = pages.find((p) => p.pagetype === "leaf")!;
      const at = (leaf.pageno - 1) * pageSize + 1;
      bytes[at] = bytes[at]! ^ 0x5a;
    });
    await expectRefused(file, /corrupted \(quick_check: .*free space corruption/s);
  });

  it("a write that meets another connection's write lock is tried again, and then refused naming the file and the busy timeout", async () => {
    const file = join(dir, "cairn.db");
    const store = sqliteStore(file, { busyTimeoutMs: 20 });
    await store.open({ clock: realClock });
    const run = (id: string) => ({ id, workflow: "wf", version: "1", input: "1", budgetLimit: {} });
    const holder = new Database(file);
    try {
      // Held across the whole retry window: four tries, three pauses, all BUSY.
      holder.exec("BEGIN IMMEDIATE");
      const err = await store.createRun(run("run_refused")).then(
        () => undefined,
        (e: unknown) => e,
      );
      holder.exec("COMMIT");
      expect(err).toBeInstanceOf(StoreError);
      expect((err as Error).message).toContain(
        `SQLite store "${file}": createRun failed with SQLITE_BUSY`,
      );
      expect((err as Error).message).toContain("the busy timeout (20 ms); raise busyTimeoutMs");
      expect(await store.getRun("run_refused")).toBeUndefined();

      // Let go during the retries: the write lands once, as if nothing had happened.
      holder.exec("BEGIN IMMEDIATE");
      const written = store.createRun(run("run_retried"));
      await new Promise((r) => setTimeout(r, 25));
      holder.exec("COMMIT");
      await written;
      expect((await store.getRun("run_retried"))?.status).toBe("pending");
    } finally {
      if (holder.inTransaction) holder.exec("ROLLBACK");
      holder.close();
      await store.close();
    }
  });

  it("reopens a WAL file while another connection has it open", async () => {
    const file = join(dir, "cairn.db");
    const first = sqliteStore(file);
    await first.open({ clock: realClock });
    await first.createRun({
      id: "run_1",
      workflow: "wf",
      version: "1",
      input: "1",
      budgetLimit: {},
    });
    const second = sqliteStore(file);
    await second.open({ clock: realClock });
    expect(second.pragma("journal_mode")).toBe("wal");
    expect((await second.getRun("run_1"))?.input).toBe("1");
    await second.close();
    await first.close();
    // And after every connection closed (the WAL checkpointed and removed).
    const third = sqliteStore(file);
    await third.open({ clock: realClock });
    expect(await third.listRuns()).toHaveLength(1);
    await third.close();
  });

  it("stores NUL characters in identifiers and payloads verbatim", async () => {
    const store = sqliteStore(join(dir, "cairn.db"));
    await store.open({ clock: createSettableClock() });
    const id = "run_\u0000after-nul";
    await store.createRun({
      id,
      workflow: "w\u0000f",
      version: "1",
      input: "a\u0000b",
      budgetLimit: {},
    });
    expect(await store.getRun("run_")).toBeUndefined();
    expect(await store.getRun(id)).toMatchObject({ id, workflow: "w\u0000f", input: "a\u0000b" });
    await store.close();
  });

  it("lists runs created in the same millisecond by id, descending", async () => {
    const store = sqliteStore(join(dir, "cairn.db"));
    await store.open({ clock: createSettableClock() });
    for (const id of ["run_b", "run_c", "run_a"]) {
      await store.createRun({ id, workflow: "wf", version: "1", input: "1", budgetLimit: {} });
    }
    const all = await store.listRuns();
    expect(all.map((r) => r.id)).toEqual(["run_c", "run_b", "run_a"]);
    const next = await store.listRuns({ before: { createdAt: all[0]!.createdAt, id: "run_c" } });
    expect(next.map((r) => r.id)).toEqual(["run_b", "run_a"]);
    await store.close();
  });

  it("four processes appending to one file: every write commits, no SQLITE_BUSY", async () => {
    const file = join(dir, "shared.db");
    const writers = 4;
    const stepsPerWriter = 1_000;
    const store = sqliteStore(file);
    await store.open({ clock: realClock });
    const runs: Array<{ runId: string; epoch: number }> = [];
    for (let w = 0; w < writers; w++) {
      await store.createRun({
        id: `run_w${w}`,
        workflow: "wf",
        version: "1",
        input: "null",
        budgetLimit: {},
      });
    }
    for (const c of await store.claimRuns({
      workerId: "parent",
      workflows: ["wf@1"],
      limit: writers,
      leaseMs: 600_000,
    })) {
      runs.push({ runId: c.run.id, epoch: c.run.epoch });
    }
    expect(runs).toHaveLength(writers);

    // Each child opens its own connection and appends one step per transaction, as fast as
    // it can, so the four contend for the write lock the whole time.
    const storeUrl = pathToFileURL(
      join(import.meta.dirname, "../src/store/sqlite/sqlite-store.ts"),
    );
    const child = `
      const { sqliteStore } = await import(${JSON.stringify(storeUrl.href)});
      const [file, runId, epoch, n] = process.argv.slice(1);
      const clock = { now: () => Date.now(), sleep: () => Promise.resolve() };
      const store = sqliteStore(file);
      await store.open({ clock });
      // Start together: wait for the parent's "go" once every writer has opened.
      process.stdout.write("ready\\n");
      await new Promise((resolve) => process.stdin.once("data", resolve));
      let ok = 0;
      const failures = [];
      const firstAt = Date.now();
      for (let i = 0; i < Number(n); i++) {
        try {
          const [out] = await store.appendRecords([{ runId, epoch: Number(epoch), steps: [{
            runId, key: "s" + i, seq: i, name: "s", kind: "step", outcome: "ok",
            result: String(i), error: null, spend: { tokens: 1 }, attempt: 1,
            startedAt: 0, completedAt: 0, generation: 0, delivery: i, issuedAfter: i,
            issuedLate: false }] }]);
          if (out.ok) ok++; else failures.push(JSON.stringify(out));
        } catch (err) {
          failures.push(String(err && err.message));
        }
      }
      await store.close();
      process.stdout.write(JSON.stringify({ ok, failures, firstAt, lastAt: Date.now() }));
    `;
    const children = runs.map((r) =>
      spawn(
        process.execPath,
        [
          "--import",
          "tsx",
          "--input-type=module",
          "-e",
          child,
          file,
          r.runId,
          String(r.epoch),
          String(stepsPerWriter),
        ],
        { stdio: ["pipe", "pipe", "pipe"] },
      ),
    );
    const ready = new Set<number>();
    const results = await Promise.all(
      children.map(
        (p, i) =>
          new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
            let stdout = "";
            let stderr = "";
            // A bound, so a stuck writer fails the test instead of hanging it.
            const guard = setTimeout(() => p.kill("SIGKILL"), 60_000);
            p.stdout.on("data", (d) => {
              stdout += d;
              if (!ready.has(i) && stdout.startsWith("ready\n")) {
                ready.add(i);
                if (ready.size === children.length) for (const c of children) c.stdin.end("go\n");
              }
            });
            p.stderr.on("data", (d) => {
              stderr += d;
            });
            p.on("close", (code) => {
              clearTimeout(guard);
              resolve({ code, stdout: stdout.replace(/^ready\n/, ""), stderr });
            });
          }),
      ),
    );
    const spans: Array<{ firstAt: number; lastAt: number }> = [];
    for (const r of results) {
      expect(r.stderr).not.toMatch(/SQLITE_BUSY|database is locked/);
      expect(r.code, r.stderr).toBe(0);
      const out = JSON.parse(r.stdout);
      expect(out).toMatchObject({ ok: stepsPerWriter, failures: [] });
      spans.push(out);
    }
    // The writers really contended: all four were writing at one moment.
    const latestStart = Math.max(...spans.map((s) => s.firstAt));
    const earliestEnd = Math.min(...spans.map((s) => s.lastAt));
    expect(latestStart).toBeLessThan(earliestEnd);
    for (const r of runs) {
      const j = await store.loadJournal(r.runId);
      expect(j.steps.map((s: StepRecord) => s.seq)).toEqual(
        Array.from({ length: stepsPerWriter }, (_, i) => i),
      );
      expect((await store.getRun(r.runId))?.budgetSpent).toEqual({ tokens: stepsPerWriter });
    }
    await store.close();
  });
});
