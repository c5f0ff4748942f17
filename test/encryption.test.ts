// Payload encryption at rest (encryptedStore): with keys, no secret from any kind of payload
// is in the SQLite file or in any PostgreSQL table, while the same scenario without keys
// shows every one of them (so the search could find each); keys rotate; a payload whose key
// is missing is a clear error naming the key, pauses the run instead of looping, and reads
// as "encrypted with key K" in inspection.

import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateText, stepCountIs } from "ai";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { createAi } from "../src/ai/index.js";
import {
  type AnyWorkflow,
  createEngine,
  EncryptedValue,
  type EncryptionKey,
  encryptedStore,
  FatalError,
  PayloadKeyError,
  parseEncryptionKeys,
  realClock,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { createSettableClock, describeStoreContract } from "../src/testing/store-contract.js";
import { agentModel, agentTools } from "./fixtures/ai-agent.js";
import { memoryDeps } from "./helpers/ai.js";
import { cairn } from "./helpers/cli.js";
import { advanceUntil, pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";

const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

/** One secret per kind of payload; each must be found in a plain store. */
const SECRETS = {
  input: "SecretInput7f3a",
  result: "SecretResult91bc",
  stepError: "SecretStepError2d4e",
  attemptError: "SecretAttempt5a6b",
  event: "SecretEvent8c1d",
  approvalRequest: "SecretRequest3e9f",
  approvalComment: "SecretComment6b2a",
  approvalAnswer: "SecretAnswer4d7c",
  model: "SecretModelTopic1f8e",
  blob: "SecretBlob9a3c",
  output: "SecretOutput2b5d",
  failure: "SecretFailure7e4f",
  cancel: "SecretCancel0c6a",
} as const;

interface Backing {
  store(): Store;
  /** Every stored byte, as text and as the hex PostgreSQL shows bytea in. */
  dump(): Promise<string>;
  cleanup(): Promise<void>;
}

function sqliteBacking(): Backing {
  const t = tempDir("cairn-enc-");
  const path = join(t.dir, "cairn.db");
  return {
    store: () => sqliteStore(path),
    async dump() {
      return [path, `${path}-wal`]
        .filter((p) => existsSync(p))
        .map((p) => readFileSync(p).toString("latin1"))
        .join("\n");
    },
    async cleanup() {
      t.cleanup();
    },
  };
}

function postgresBacking(url: string): Backing {
  const { schema, drop } = testSchema(url, "cairn_enc");
  return {
    store: () => postgresStore(url, { schema }),
    async dump() {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        const tables = await client.query<{ t: string }>(
          "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = $1",
          [schema],
        );
        expect(tables.rows.length).toBeGreaterThan(5);
        let all = "";
        for (const { t } of tables.rows) {
          const rows = await client.query<{ row: string }>(
            `SELECT x::text AS row FROM "${schema}"."${t}" x`,
          );
          for (const r of rows.rows) all += `${r.row}\n`;
        }
        return all;
      } finally {
        await client.end();
      }
    },
    cleanup: drop,
  };
}

const hex = (s: string) => Buffer.from(s).toString("hex");

/** The secrets of `SECRETS` found in `dump` (as text or as bytea hex). */
function found(dump: string): string[] {
  return Object.entries(SECRETS)
    .filter(([, s]) => dump.includes(s) || dump.includes(hex(s)))
    .map(([kind]) => kind);
}

/** Runs a scenario that stores every kind of payload, each holding its secret. */
async function storeEverything(store: Store): Promise<void> {
  const clock = createVirtualClock();
  const dir = tempDir("cairn-enc-ws-");
  writeFileSync(join(dir.dir, "notes.txt"), `${SECRETS.blob}\n`);
  const ai = createAi({ store, clock });
  const deps = memoryDeps();
  const model = agentModel({ deps });
  let failedOnce = false;
  const everything = workflow({ name: "everything", version: "1" }, async (ctx, input: unknown) => {
    const r = await ctx.step("result", () => SECRETS.result);
    const caught = await ctx
      .step("fails", () => {
        throw new FatalError(SECRETS.stepError);
      })
      .catch((e: Error) => e.message.length);
    await ctx.step(
      "flaky",
      () => {
        if (!failedOnce) {
          failedOnce = true;
          throw new Error(SECRETS.attemptError);
        }
        return 1;
      },
      { retry: { initialDelay: "1ms", jitter: false } },
    );
    const ev = await ctx.waitForEvent("go");
    const ok = await ctx.approval("ship", { request: { what: SECRETS.approvalRequest } });
    const ws = await ctx.workspace("repo", { dir: dir.dir });
    await ws.step("touch", () => 1);
    const agent = await generateText({
      model: ai.model(ctx, model),
      tools: ai.tools(ctx, agentTools(deps)),
      stopWhen: stepCountIs(10),
      prompt: `Research ${SECRETS.model} and open a pull request with a note.`,
    });
    return { input, r, caught, ev, ok, text: agent.text, out: SECRETS.output };
  });
  const failing = workflow({ name: "failing", version: "1" }, async () => {
    throw new FatalError(SECRETS.failure);
  });
  const waits = workflow({ name: "waits", version: "1" }, async (ctx) => {
    await ctx.waitForEvent("never");
  });
  const engine = createEngine({
    store,
    clock,
    pollIntervalMs: 10,
    workflows: [everything, failing, waits] as AnyWorkflow[],
  });
  try {
    const run = await engine.start(everything, { note: SECRETS.input });
    await until(async () => {
      await clock.advance(50); // the flaky step's retry waits on the clock
      return (await run.info())?.waitingFor?.includes("go");
    }, "the run waits");
    await engine.sendEvent(run.id, "go", { said: SECRETS.event });
    await until(
      async () => (await engine.listApprovals(run.id)).length === 1,
      "the approval is asked",
    );
    await engine.approve(run.id, "ship", {
      by: "alice",
      comment: SECRETS.approvalComment,
      answer: { note: SECRETS.approvalAnswer },
    });
    const out = (await advanceUntil(clock, run.result(), 50)) as { out: string };
    expect(out.out).toBe(SECRETS.output);
    const f = await engine.start(failing, undefined);
    await expect(f.result()).rejects.toThrow(SECRETS.failure);
    const w = await engine.start(waits, undefined);
    await until(async () => (await w.info())?.status === "waiting", "waits");
    await engine.cancel(w.id, SECRETS.cancel);
    // Decrypted on the way out: the engine sees the plain values.
    expect((await engine.getRun(f.id))?.error?.message).toContain(SECRETS.failure);
    expect((await engine.getRun(w.id))?.reason).toContain(SECRETS.cancel);
  } finally {
    await engine.close();
    await ai.close();
    dir.cleanup();
  }
}

const backings: Array<[string, () => Backing]> = [["sqlite", sqliteBacking]];
if (pgUrl) backings.push(["postgres", () => postgresBacking(pgUrl as string)]);

describe.each(backings)("payload encryption (%s)", (_name, makeBacking) => {
  it("a plain store holds every secret; an encrypted one holds none of them", async () => {
    const plain = makeBacking();
    const encrypted = makeBacking();
    try {
      await storeEverything(plain.store());
      expect(found(await plain.dump()).sort()).toEqual(Object.keys(SECRETS).sort());
      await storeEverything(encryptedStore(encrypted.store(), { keys: [key("k1")] }));
      const dump = await encrypted.dump();
      expect(found(dump)).toEqual([]);
      expect(dump).toContain("cairn:enc:1:k1:");
    } finally {
      await plain.cleanup();
      await encrypted.cleanup();
    }
  });

  it("rotation: new writes use the first key, older payloads stay readable; a missing key pauses the run and names the key", async () => {
    const b = makeBacking();
    const clock = createVirtualClock();
    const k1 = key("k1");
    const k2 = key("k2");
    const wf = workflow({ name: "rot", version: "1" }, async (ctx, input: { n: string }) => {
      const a = await ctx.step("a", () => `a-${input.n}`);
      const ev = await ctx.waitForEvent<string>("go");
      return `${a}/${ev.timedOut ? "timeout" : ev.payload}`;
    });
    try {
      const first = createEngine({
        store: encryptedStore(b.store(), { keys: [k1] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      const run = await first.start(wf, { n: "one" }, { id: "rot-1" });
      await first.start(wf, { n: "three" }, { id: "rot-3" });
      await until(async () => (await run.info())?.status === "waiting", "waits");
      await until(async () => (await first.getRun("rot-3"))?.status === "waiting", "waits");
      await first.close();

      // Rotated: k2 encrypts, k1 still reads.
      const second = createEngine({
        store: encryptedStore(b.store(), { keys: [k2, k1] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await second.sendEvent("rot-1", "go", "two");
      expect(await second.handle("rot-1").result()).toBe("a-one/two");
      await second.close();
      const raw = b.store();
      await raw.open({ clock });
      const row = await raw.getRun("rot-1");
      expect(row?.input.startsWith("cairn:enc:1:k1:")).toBe(true);
      expect(row?.output?.startsWith("cairn:enc:1:k2:")).toBe(true);
      const events = await raw.listEvents("rot-1");
      expect(events[0]?.payload.startsWith("cairn:enc:1:k2:")).toBe(true);

      // Inspection without the keys says which key, never the text.
      const noKeys = createEngine({ store: b.store(), worker: false, clock });
      const view = await noKeys.getRun("rot-1");
      expect(view?.input).toBeInstanceOf(EncryptedValue);
      expect(String(view?.input)).toBe('[encrypted with key "k1"]');
      expect(String(view?.output)).toBe('[encrypted with key "k2"]');
      const steps = await noKeys.getSteps("rot-1");
      expect(String(steps.find((s) => s.key === "a")?.result)).toBe('[encrypted with key "k1"]');
      await noKeys.close();

      // Only k2: reading a k1 payload is an error naming k1.
      const third = createEngine({
        store: encryptedStore(b.store(), { keys: [k2] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await expect(third.getRun("rot-1")).rejects.toThrow(PayloadKeyError);
      await expect(third.getRun("rot-1")).rejects.toThrow(
        /encrypted with key "k1", which is not among the keys given \("k2"\); add key "k1"/,
      );
      // Its worker claims rot-3 (input under k1) once and pauses it, naming the key.
      await third.sendEvent("rot-3", "go", "four");
      const paused = await until(async () => {
        const r = await raw.getRun("rot-3");
        return r?.status === "paused" ? r : undefined;
      }, "rot-3 is paused");
      expect(paused.reason).toMatch(/encrypted with key "k1", which this worker cannot read/);
      await new Promise((r) => setTimeout(r, 200)); // 20 polls of the worker
      expect((await raw.getRun("rot-3"))?.epoch).toBe(paused.epoch);
      await third.close();

      // A wrong key under the right id is caught by GCM, never read as garbage.
      const wrong = encryptedStore(b.store(), { keys: [{ id: "k1", key: k2.key }] });
      await wrong.open({ clock });
      await expect(wrong.getRun("rot-1")).rejects.toThrow(
        /cannot be decrypted with the key "k1" given: it is another key under the same id/,
      );
      await wrong.close();

      // Given the key again, the paused run resumes and completes.
      const fourth = createEngine({
        store: encryptedStore(b.store(), { keys: [k2, k1] }),
        workflows: [wf],
        clock,
        pollIntervalMs: 10,
      });
      await fourth.resume("rot-3");
      expect(await fourth.handle("rot-3").result()).toBe("a-three/four");
      await fourth.close();
      await raw.close();
    } finally {
      await b.cleanup();
    }
  });
});

describe("encryption keys", () => {
  it("refuses bad keys with the entry named, never the key", () => {
    expect(() => encryptedStore(sqliteStore(":memory:"), { keys: [] })).toThrow(/at least one key/);
    expect(() =>
      encryptedStore(sqliteStore(":memory:"), { keys: [{ id: "k1", key: "c2hvcnQ=" }] }),
    ).toThrow(/key "k1" is 5 bytes; AES-256 needs 32/);
    expect(() =>
      encryptedStore(sqliteStore(":memory:"), { keys: [{ id: "bad id", key: key("x").key }] }),
    ).toThrow(/key #1 has id "bad id"/);
    const k = key("a");
    expect(() => encryptedStore(sqliteStore(":memory:"), { keys: [k, k] })).toThrow(
      /"a" is given twice/,
    );
    expect(parseEncryptionKeys(`a=${k.key}, b=${key("b").key}`).map((x) => x.id)).toEqual([
      "a",
      "b",
    ]);
    expect(() => parseEncryptionKeys("nokey")).toThrow(/entry #1/);
  });
});

// Every verb keeps its contract through the decorator (values go in and come out plain).
describeStoreContract("sqlite through encryptedStore", async () => {
  const t = tempDir("cairn-enc-contract-");
  return {
    store: encryptedStore(sqliteStore(join(t.dir, "cairn.db")), { keys: [key("k1")] }),
    clock: createSettableClock(),
    cleanup: async () => t.cleanup(),
    // "CAIRNENC1", the id's length and "k1", iv, tag.
    storedBytes: (n) => n + 9 + 1 + 2 + 12 + 16,
    encrypts: true,
  };
});

describe("the CLI on an encrypted store", () => {
  it("cairn show decrypts with $CAIRN_ENCRYPTION_KEYS, and says which key without it", async () => {
    const t = tempDir("cairn-enc-cli-");
    const path = join(t.dir, "cairn.db");
    const k = key("k7");
    const wf = workflow({ name: "cli-enc", version: "1" }, async (ctx, input: { s: string }) =>
      ctx.step("echo", () => `${input.s}!`),
    );
    const engine = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k] }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    const run = await engine.start(wf, { s: SECRETS.input }, { id: "enc-cli" });
    await run.result();
    await engine.close();
    const show = (env: Record<string, string>) => cairn(["show", "enc-cli", "--store", path], env);
    try {
      const withKey = await show({ CAIRN_ENCRYPTION_KEYS: `k7=${k.key}` });
      expect(withKey.code, withKey.stderr).toBe(0);
      expect(withKey.stdout).toContain(`${SECRETS.input}!`);
      const without = await show({ CAIRN_ENCRYPTION_KEYS: "" });
      expect(without.code, without.stderr).toBe(0);
      expect(without.stdout).toContain('[encrypted with key "k7"]');
      expect(without.stdout).not.toContain(SECRETS.input);
      const bad = await show({ CAIRN_ENCRYPTION_KEYS: "k7" });
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(
        /CAIRN_ENCRYPTION_KEYS: encryption keys are written "id=base64key/,
      );
      expect(bad.stderr).not.toContain(k.key as string);
    } finally {
      t.cleanup();
    }
  });
});

describe("selectStore and CAIRN_ENCRYPTION_KEYS", () => {
  it("a starter's selectStore encrypts as the CLI does; a malformed value is refused", async () => {
    const { selectStore } = await import("../src/index.js");
    const dir = mkdtempSync(join(tmpdir(), "cairn-select-enc-"));
    const key = `k1=${randomBytes(32).toString("base64")}`;
    const file = join(dir, "c.db");
    const store = await selectStore({
      store: `sqlite:${file}`,
      env: { CAIRN_ENCRYPTION_KEYS: key },
    });
    await store.open({ clock: realClock });
    await store.createRun({
      id: "enc-1",
      workflow: "wf",
      version: "1",
      input: JSON.stringify("select-store-secret"),
      budgetLimit: {},
    });
    await store.close();
    expect(readFileSync(file).includes(Buffer.from("select-store-secret"))).toBe(false);
    await expect(
      selectStore({ store: `sqlite:${file}`, env: { CAIRN_ENCRYPTION_KEYS: "nonsense" } }),
    ).rejects.toThrow(/CAIRN_ENCRYPTION_KEYS/);
    rmSync(dir, { recursive: true, force: true });
  });
});
