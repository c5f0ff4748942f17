// Found by a review of production hygiene: payload encryption at rest through
// every door (the HTTP API, the CLI), free text that begins like an encrypted payload, and
// event names no URL can carry. Each test failed before its mend.

import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import {
  createEngine,
  type EncryptionKey,
  encryptedStore,
  FatalError,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { call } from "./helpers/http.js";
import { tempDir, until } from "./helpers/sqlite.js";

type ErrorJson = { error: { code: string; message: string } };

const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

/** The SQLite file and its write-ahead log, as text. */
function storedText(path: string): string {
  const wal = `${path}-wal`;
  return [path, ...(existsSync(wal) ? [wal] : [])].map((p) => readFileSync(p, "latin1")).join("");
}

describe("the HTTP API of a server without the key, on an encrypted store", () => {
  it("refuses to store an event's payload, a cancel reason, an approval comment or a new run's input in plain text (409 naming the key), writing nothing", async () => {
    const t = tempDir("enc-doors-http-plain-");
    const path = join(t.dir, "cairn.db");
    const k = key("k1");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => {
      await ctx.approval("merge", { request: "+fix" });
      return ctx.waitForEvent("card");
    });
    const worker = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k] }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    // `cairn ui` without $CAIRN_ENCRYPTION_KEYS: a client engine on the plain store.
    const client = createEngine({ store: sqliteStore(path), workflows: [wf], worker: false });
    const app = createHttpApp({ engine: client });
    try {
      await worker.start(wf, { secret: "input" }, { id: "p1" });
      await until(async () => (await worker.listApprovals("p1")).length === 1, "p1 asks");
      const sent = await call<ErrorJson>(app.fetch, "POST", "/api/runs/p1/events/card", {
        body: "SECRET-card",
      });
      const approved = await call<ErrorJson>(
        app.fetch,
        "POST",
        "/api/runs/p1/approvals/merge/approve",
        {
          body: { comment: "SECRET-plan" },
        },
      );
      const canceled = await call<ErrorJson>(app.fetch, "POST", "/api/runs/p1/cancel", {
        body: { reason: "SECRET-why" },
      });
      const started = await call<ErrorJson>(app.fetch, "POST", "/api/runs", {
        body: { workflow: "wf", input: "SECRET-input", id: "p2" },
      });
      for (const res of [sent, approved, canceled, started]) {
        expect([res.status, res.body.error?.code]).toEqual([409, "ENCRYPTION_KEY_MISSING"]);
        expect(res.body.error.message).toMatch(/key "k1".*nothing was (written|started)/);
      }
      expect(storedText(path)).not.toContain("SECRET");
      expect(await worker.listEvents("p1")).toEqual([]);
      expect((await worker.listApprovals("p1"))[0]?.status).toBe("pending");
      expect((await worker.getRun("p1"))?.reason ?? null).toBeNull();
      expect(await worker.getRun("p2")).toBeUndefined();
      // A run started by a client with no keys: its input is plain, and the approval request
      // its worker wrote is not.
      await client.start(wf, undefined, { id: "p3" });
      await until(async () => (await worker.listApprovals("p3")).length === 1, "p3 asks");
      const onPlainInput = await call<ErrorJson>(
        app.fetch,
        "POST",
        "/api/runs/p3/approvals/merge/reject",
        { body: { comment: "SECRET-no" } },
      );
      expect([onPlainInput.status, onPlainInput.body.error?.code]).toEqual([
        409,
        "ENCRYPTION_KEY_MISSING",
      ]);
      expect(storedText(path)).not.toContain("SECRET");
      // What carries no payload still works: an answer without a comment.
      const plain = await call(app.fetch, "POST", "/api/runs/p1/approvals/merge/approve", {});
      expect(plain.status).toBe(200);
      // A server given the key goes through, encrypted.
      const keyed = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [k] }),
        workflows: [wf],
        worker: false,
      });
      const keyedApp = createHttpApp({ engine: keyed });
      const ok = await call(keyedApp.fetch, "POST", "/api/runs/p1/events/card", {
        body: "SECRET-card",
      });
      expect(ok.status).toBe(201);
      expect(storedText(path)).not.toContain("SECRET");
      keyedApp.close();
      await keyed.close();
      // A server whose key was rotated (k1 retired) cannot read the old runs, yet writes
      // encrypted: it is not refused.
      const rotated = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [key("k2")] }),
        workflows: [wf],
        worker: false,
      });
      const rotatedApp = createHttpApp({ engine: rotated });
      const onOld = await call(rotatedApp.fetch, "POST", "/api/runs/p1/events/other", {
        body: "SECRET-later",
      });
      const fresh = await call(rotatedApp.fetch, "POST", "/api/runs", {
        body: { workflow: "wf", input: "SECRET-fresh", id: "p4" },
      });
      expect([onOld.status, fresh.status]).toEqual([201, 201]);
      expect(storedText(path)).not.toContain("SECRET");
      rotatedApp.close();
      await rotated.close();
    } finally {
      app.close();
      await client.close();
      await worker.close();
      t.cleanup();
    }
  });
});

describe("cairn start --input without $CAIRN_ENCRYPTION_KEYS on an encrypted store", () => {
  it("is refused naming the key, and starts nothing (the input would be stored in plain text)", async () => {
    const t = tempDir("enc-doors-cli-start-");
    const path = join(t.dir, "cairn.db");
    const k = key("k1");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.waitForEvent("go"));
    const engine = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k] }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    try {
      await engine.start(wf, { a: 1 }, { id: "first" });
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const res = await cairn(["start", "wf@1", "--input", '"SECRET-input"', "--id", "p2"], env);
      expectFailure(res, 1, /encrypted \(run "first" is, with key "k1"\).*nothing was started/);
      expect(await engine.getRun("p2")).toBeUndefined();
      expect(storedText(path)).not.toContain("SECRET");
      const keyed = await cairn(["start", "wf@1", "--input", '"SECRET-input"', "--id", "p2"], {
        ...env,
        CAIRN_ENCRYPTION_KEYS: `k1=${k.key}`,
      });
      expect(keyed.code, keyed.stderr).toBe(0);
      expect((await engine.getRun("p2"))?.input).toBe("SECRET-input");
      expect(storedText(path)).not.toContain("SECRET");
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

describe("an error message that begins like an encrypted payload", () => {
  const msg = `cairn:enc:1:k9:${Buffer.alloc(40, 7).toString("base64")}`;
  const wf = workflow({ name: "looks", version: "1" }, async (ctx) => {
    let caught = "";
    try {
      await ctx.step("s", async () => {
        throw new FatalError(msg);
      });
    } catch (err) {
      caught = (err as Error).message;
    }
    // Suspends: the output is made by a replay, which reads the step's error back.
    await ctx.waitForEvent("go");
    return caught;
  });
  const fails = workflow({ name: "fails", version: "1" }, async (ctx) => {
    await ctx.step("s", async () => {
      throw new FatalError(msg);
    });
  });

  for (const encrypted of [false, true]) {
    it(`reads back as itself (inspection, a replay, a failed run), ${encrypted ? "through an encrypted store" : "on a plain store"}`, async () => {
      const t = tempDir("enc-doors-looks-");
      const path = join(t.dir, "cairn.db");
      const k = key("k1");
      const store = (): Store =>
        encrypted ? encryptedStore(sqliteStore(path), { keys: [k] }) : sqliteStore(path);
      const engine = createEngine({ store: store(), workflows: [wf, fails], pollIntervalMs: 10 });
      try {
        await engine.start(wf, undefined, { id: "r1" });
        await engine.start(fails, undefined, { id: "r2" });
        await until(async () => (await engine.getRun("r1"))?.status === "waiting", "r1 waits");
        await until(async () => (await engine.getRun("r2"))?.status === "failed", "r2 fails");
        expect((await engine.getSteps("r1"))[0]?.error?.message).toBe(msg);
        await engine.sendEvent("r1", "go", undefined);
        expect(await engine.handle("r1").result()).toBe(msg);
        const failed = await engine.getRun("r2");
        expect(failed?.error?.message).toBe(msg);
        expect(failed?.reason).toBe(`FatalError: ${msg}`);
        await expect(engine.handle("r2").result()).rejects.toThrow(msg);
      } finally {
        await engine.close();
      }
      // Encryption turned on later: what was stored plain stays readable as itself.
      const later = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [key("k2")] }),
        workflows: [wf, fails],
        worker: false,
      });
      try {
        if (!encrypted) {
          expect((await later.getRun("r2"))?.error?.message).toBe(msg);
          expect((await later.getSteps("r2"))[0]?.error?.message).toBe(msg);
        }
      } finally {
        await later.close();
        t.cleanup();
      }
    });
  }

  it("a cancel reason or an approval comment that begins so is refused naming the run (over HTTP a 400), and nothing is written", async () => {
    const t = tempDir("enc-doors-looks-");
    const asks = workflow({ name: "asks", version: "1" }, async (ctx) => {
      await ctx.approval("merge", { request: "+fix" });
    });
    const engine = createEngine({
      store: sqliteStore(join(t.dir, "cairn.db")),
      workflows: [asks],
      pollIntervalMs: 10,
    });
    const app = createHttpApp({ engine });
    try {
      await engine.start(asks, undefined, { id: "a1" });
      await until(async () => (await engine.getRun("a1"))?.status === "waiting", "a1 waits");
      expect((await engine.listApprovals("a1")).length).toBe(1);
      await expect(engine.cancel("a1", msg)).rejects.toThrow(
        /cancel\(\): the reason for run "a1" begins with "cairn:enc:"/,
      );
      await expect(engine.approve("a1", "merge", { comment: msg })).rejects.toThrow(
        /comment on approval "merge" of run "a1" begins with "cairn:enc:"/,
      );
      const canceled = await call<ErrorJson>(app.fetch, "POST", "/api/runs/a1/cancel", {
        body: { reason: msg },
      });
      const approved = await call<ErrorJson>(
        app.fetch,
        "POST",
        "/api/runs/a1/approvals/merge/approve",
        {
          body: { comment: msg },
        },
      );
      for (const res of [canceled, approved]) {
        expect([res.status, res.body.error?.code]).toEqual([400, "VALIDATION"]);
        expect(res.body.error.message).toMatch(/begins with "cairn:enc:"/);
      }
      expect((await engine.getRun("a1"))?.status).toBe("waiting");
      expect((await engine.listApprovals("a1"))[0]?.status).toBe("pending");
    } finally {
      app.close();
      await engine.close();
      t.cleanup();
    }
  });
});

describe("the run page of a value that reads like a placeholder", () => {
  it("shows a user's string '[encrypted with key \"x\"]' as itself, and a value it cannot read as a tag", async () => {
    const t = tempDir("enc-doors-page-");
    const path = join(t.dir, "cairn.db");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.waitForEvent("go"));
    const engine = createEngine({ store: sqliteStore(path), workflows: [wf], worker: false });
    const app = createHttpApp({ engine });
    // Started before an encryptedStore marks the store (a marked store refuses plain text).
    await engine.start(wf, '[encrypted with key "x"]', { id: "looks" });
    const encrypting = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [key("k1")] }),
      workflows: [wf],
      worker: false,
    });
    try {
      await encrypting.start(wf, "secret", { id: "sealed" });
      const looks = await call<string>(app.fetch, "GET", "/runs/looks");
      expect(looks.body).toContain(
        '<pre class="value">&quot;[encrypted with key \\&quot;x\\&quot;]&quot;</pre>',
      );
      expect(looks.body).not.toContain(
        '<span class="tag warn" title="This server is not given the key',
      );
      const sealed = await call<string>(app.fetch, "GET", "/runs/sealed");
      expect(sealed.body).toContain(
        '<span class="tag warn" title="This server is not given the key; the value is not shown">encrypted with key &quot;k1&quot;</span>',
      );
    } finally {
      app.close();
      await engine.close();
      await encrypting.close();
      t.cleanup();
    }
  });
});

describe('an event named "." or ".." over HTTP', () => {
  it("is a 400 naming the rule (clients resolve the segment away), not 'No API route', and nothing is stored", async () => {
    const t = tempDir("enc-doors-dots-");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.waitForEvent(".."));
    const engine = createEngine({
      store: sqliteStore(join(t.dir, "cairn.db")),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    const app = createHttpApp({ engine });
    try {
      await engine.start(wf, undefined, { id: "d1" });
      await until(async () => (await engine.getRun("d1"))?.status === "waiting", "d1 waits");
      for (const path of [
        "/api/runs/d1/events/.",
        "/api/runs/d1/events/..",
        "/api/runs/d1/events/%2E",
        "/api/runs/d1/events/%2e%2E",
        "/api/runs/d1/approvals/./approve",
        "/api/runs/d1/approvals/../reject",
      ]) {
        const res = await call<ErrorJson>(app.fetch, "POST", path, { body: 1 });
        expect([path, res.status, res.body.error?.code]).toEqual([path, 400, "VALIDATION"]);
        expect(res.body.error.message).toMatch(/named "\." or "\.\." cannot be sent over HTTP/);
      }
      expect(await engine.listEvents("d1")).toEqual([]);
      // Other paths are still not found, and the engine delivers such an event.
      const other = await call<ErrorJson>(app.fetch, "POST", "/api/runs/d1/nothing", { body: 1 });
      expect(other.status).toBe(404);
      await engine.sendEvent("d1", "..", "ok");
      expect(await engine.handle("d1").result()).toEqual({ timedOut: false, payload: "ok" });
    } finally {
      app.close();
      await engine.close();
      t.cleanup();
    }
  });
});

describe("an encrypted error message whose header is damaged (a flipped byte)", () => {
  for (const [what, from, to] of [
    ["the colon after the key id", "cairn:enc:1:k1:", "cairn:enc:1:k1;"],
    ["the version", "cairn:enc:1:k1:", "cairn:enc:7:k1:"],
    ["the version, to 0 (escaped plain text)", "cairn:enc:1:k1:", "cairn:enc:0:k1:"],
  ] as const) {
    it(`(${what}) is never handed to a replay as other text: the run pauses naming the damage`, async () => {
      const t = tempDir("enc-doors-damaged-");
      const path = join(t.dir, "cairn.db");
      const k = key("k1");
      const wf = workflow({ name: "wf", version: "1" }, async (ctx) => {
        let caught = "";
        try {
          await ctx.step("s", async () => {
            throw new FatalError("the real message");
          });
        } catch (err) {
          caught = (err as Error).message;
        }
        await ctx.waitForEvent("go");
        return caught;
      });
      const open = () =>
        createEngine({
          store: encryptedStore(sqliteStore(path), { keys: [k] }),
          workflows: [wf],
          pollIntervalMs: 10,
        });
      let engine = open();
      try {
        await engine.start(wf, undefined, { id: "r1" });
        await until(async () => (await engine.getRun("r1"))?.status === "waiting", "r1 waits");
        await engine.close();
        const db = new Database(path);
        const changed = db
          .prepare("UPDATE steps SET error = replace(error, ?, ?) WHERE run_id = 'r1'")
          .run(from, to);
        db.close();
        expect(changed.changes).toBe(1);
        engine = open();
        await engine.sendEvent("r1", "go", undefined);
        const settled = ["completed", "failed", "paused"];
        await until(async () => {
          const st = (await engine.getRun("r1").catch(() => undefined))?.status;
          return st !== undefined && settled.includes(st);
        }, "r1 settles");
        const run = await engine.getRun("r1");
        expect([run?.status, run?.output]).toEqual(["paused", undefined]);
        expect(run?.reason).toBe(
          'run "r1" has an encrypted payload whose header is damaged, so no key can read it; restore the damaged record from a backup and resume the run, or fork it from a step before the damage',
        );
        // Inspection refuses the record (as for a missing key), never shows other text.
        await expect(engine.getSteps("r1")).rejects.toThrow(
          /step "s" of run "r1" is not an encrypted payload that can be read.*damaged/,
        );
        // A reader with no keys shows it as undecodable, not as its ciphertext.
        const keyless = createEngine({ store: sqliteStore(path), worker: false });
        expect((await keyless.getSteps("r1"))[0]?.error?.message).toBe("[undecodable value]");
        await keyless.close();
      } finally {
        await engine.close();
        t.cleanup();
      }
    });
  }
});

describe("the HTTP API acting on a run under a key the server no longer has", () => {
  it("cancel and resume that the store carried out answer 200 with the run as a listing shows it, not a 503 after doing it", async () => {
    const t = tempDir("enc-doors-rotated-");
    const path = join(t.dir, "cairn.db");
    const k1 = key("k1");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.waitForEvent("go"));
    const old = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k1] }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    const engine = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [key("k2")] }),
      workflows: [wf],
      worker: false,
    });
    const app = createHttpApp({ engine });
    try {
      await old.start(wf, "secret", { id: "c1" });
      await old.start(wf, "secret", { id: "c2" });
      await until(async () => (await old.getRun("c2"))?.status === "waiting", "c2 waits");
      await until(async () => (await old.getRun("c1"))?.status === "waiting", "c1 waits");
      await old.close();
      // A worker given only the new key pauses c2, whose input it cannot read.
      const worker = createEngine({
        store: encryptedStore(sqliteStore(path), { keys: [key("k3")] }),
        workflows: [wf],
        pollIntervalMs: 10,
      });
      await worker.sendEvent("c2", "go", undefined);
      await until(
        async () => (await engine.listRuns({ idContains: "c2" }))[0]?.status === "paused",
        "c2 paused",
      );
      await worker.close();
      const canceled = await call<{ run: { id: string; status: string }; state: string }>(
        app.fetch,
        "POST",
        "/api/runs/c1/cancel",
        {},
      );
      expect([canceled.status, canceled.body.run?.status, canceled.body.state]).toEqual([
        200,
        "canceled",
        "canceled",
      ]);
      const resumed = await call<{ run: { id: string; status: string } }>(
        app.fetch,
        "POST",
        "/api/runs/c2/resume",
        {},
      );
      expect([resumed.status, resumed.body.run?.status]).toEqual([200, "pending"]);
    } finally {
      app.close();
      await engine.close();
      t.cleanup();
    }
  });
});
