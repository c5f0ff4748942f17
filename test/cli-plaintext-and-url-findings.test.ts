// Findings on the CLI and hygiene mends (9490f92): each test here failed before the fix in
// src/ it names (the cancel under a rotated key list is a guard of runAfter's paging).

import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  encryptedStore,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";

const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

/** The SQLite file and its write-ahead log, as text. */
function storedText(path: string): string {
  const wal = `${path}-wal`;
  return [path, ...(existsSync(wal) ? [wal] : [])].map((p) => readFileSync(p, "latin1")).join("");
}

describe("a postgres:// URL whose password holds an unencoded /", () => {
  it("is never printed: the store's description (errors, banners) leaves the password out", async () => {
    for (const url of [
      "postgres://ann:1/Pw0rdSECRET@127.0.0.1:5432/test",
      "postgres://ann:/Pw0rdSECRET@127.0.0.1:5432/test",
    ]) {
      const store = postgresStore(url);
      expect(store.description).not.toContain("SECRET");
      await store.close().catch(() => {});
    }
  });
});

/** A store of `kind` for a test, what the CLI is given to reach it, and its cleanup. */
async function storeFor(
  kind: "sqlite" | "postgres",
): Promise<
  { make: () => Store; env: Record<string, string>; cleanup: () => Promise<void> } | undefined
> {
  if (kind === "sqlite") {
    const t = tempDir("cairn-cli-findings-");
    const path = join(t.dir, "cairn.db");
    return {
      make: () => sqliteStore(path),
      env: { CAIRN_STORE: `sqlite:${path}` },
      cleanup: async () => t.cleanup(),
    };
  }
  const url = await postgresTestUrl();
  if (url === undefined) return undefined;
  const { schema, drop } = testSchema(url, "cairn_cli_findings");
  return {
    make: () => postgresStore(url, { schema }),
    env: { CAIRN_STORE: url, CAIRN_PG_SCHEMA: schema },
    cleanup: drop,
  };
}

describe.each(["sqlite", "postgres"] as const)(
  "the CLI without $CAIRN_ENCRYPTION_KEYS on a run whose input is plain but whose records are encrypted (%s)",
  (kind) => {
    it("refuses the event's payload (a run started without input, or by a client with no keys)", async () => {
      const s = await storeFor(kind);
      if (!s) return;
      const k = key("k1");
      const wf = workflow({ name: "wf", version: "1" }, async (ctx) => {
        await ctx.step("a", () => "step result");
        return ctx.waitForEvent("card");
      });
      // Started by a client with no keys (cairn start, an app without the key list): the
      // input is plain; the worker with the key encrypts every record after it.
      const client = createEngine({ store: s.make(), worker: false });
      await client.start("wf@1", undefined, { id: "p1" });
      await client.close();
      const worker = createEngine({
        store: encryptedStore(s.make(), { keys: [k] }),
        workflows: [wf],
        pollIntervalMs: 10,
      });
      try {
        await until(async () => (await worker.getRun("p1"))?.status === "waiting", "p1 waits");
        const sent = await cairn(["send", "p1", "card", '"4111-1111-SECRET"'], s.env);
        expectFailure(sent, 1, /\$CAIRN_ENCRYPTION_KEYS is not set.*nothing was written/);
        expect(await worker.listEvents("p1")).toEqual([]);
      } finally {
        await worker.close();
        await s.cleanup();
      }
    });
  },
);

describe("cairn approval-link --expires out of range", () => {
  it("says a value too long is too long, and never suggests a value it refuses", async () => {
    const base = ["approval-link", "a1", "merge", "--base-url", "http://ops.test"];
    const long = await cairn([...base, "--expires", "300000000d"]);
    expectFailure(long, 2, /--expires: "300000000d" is longer than 100,000 years/);
    expect(long.stderr).not.toContain("at least");
    const short = await cairn([...base, "--expires", "500ms"]);
    expectFailure(short, 2, /--expires must be a duration of at least 1000ms, e\.g\. 30s, 2m/);
    expect(short.stderr).not.toMatch(/e\.g\.[^(]*500ms/);
  });
});

describe("cairn cancel under a rotated key list, with many runs whose ids contain the id", () => {
  it("finds the run past the first pages of the listing and reports the cancel", async () => {
    const t = tempDir("cairn-run-after-");
    const path = join(t.dir, "cairn.db");
    const [old, fresh] = [key("old"), key("new")];
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.waitForEvent("go"));
    const writer = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [old] }),
      workflows: [wf],
      worker: false,
    });
    try {
      await writer.start(wf, { s: "old" }, { id: "r1" });
      // 450 runs listed before r1 (newer, or the same ms with a greater id): three pages.
      for (let i = 0; i < 450; i++) await writer.start(wf, undefined, { id: `r1-${i}` });
    } finally {
      await writer.close();
    }
    try {
      const res = await cairn(["cancel", "r1", "--json"], {
        CAIRN_STORE: `sqlite:${path}`,
        CAIRN_ENCRYPTION_KEYS: `new=${fresh.key}`,
      });
      expect(res.code, res.stderr).toBe(0);
      expect(JSON.parse(res.stdout)).toMatchObject({ id: "r1", status: "canceled" });
    } finally {
      t.cleanup();
    }
  });
});

describe("cairn approve --comment without $CAIRN_ENCRYPTION_KEYS on a run with a plain input", () => {
  it("refuses when the approval's request is encrypted (the run's only record written by its worker)", async () => {
    const t = tempDir("cairn-plain-approval-");
    const path = join(t.dir, "cairn.db");
    const k = key("k1");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) =>
      ctx.approval("merge", { request: { diff: "+fix" } }),
    );
    const client = createEngine({ store: sqliteStore(path), worker: false });
    await client.start("wf@1", undefined, { id: "a1" });
    await client.close();
    const worker = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k] }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    try {
      await until(async () => (await worker.listApprovals("a1")).length === 1, "a1 asks");
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const approved = await cairn(["approve", "a1", "merge", "--comment", "SECRET plan"], env);
      expectFailure(approved, 1, /the comment or answer would be stored in plain text/);
      expect(storedText(path)).not.toContain("SECRET");
    } finally {
      await worker.close();
      t.cleanup();
    }
  });
});
