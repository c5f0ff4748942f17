// Findings of the review of the HTTP API and dashboard mends (run id segments, withheld
// values, disabled actions, page bounds, Idempotency-Key): each test failed before its mend.

import { randomBytes } from "node:crypto";
import { join } from "node:path";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, encryptedStore, FatalError, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { call } from "./helpers/http.js";
import { tempDir, until } from "./helpers/sqlite.js";

const TOKEN = "h7-token-h7-token-h7-token-0123";
const auth = { authorization: `Bearer ${TOKEN}` };
const ENCRYPTED_TEXT = '[encrypted with key "k1"]';
const K1 = { reason: "encrypted", keyId: "k1" };

type Json = Record<string, unknown>;

describe("withheld text: error messages, cancel reasons, approval comments", () => {
  const fails = workflow({ name: "h7-fails", version: "1" }, async (ctx) => {
    await ctx.step("work", () => {
      throw new FatalError("the secret detail");
    });
  });
  const waits = workflow({ name: "h7-waits", version: "1" }, async (ctx) => {
    await ctx.waitForEvent("go");
  });
  const asks = workflow({ name: "h7-asks", version: "1" }, async (ctx) => {
    await ctx.approval("ship", { request: { pr: 1 } });
    await ctx.waitForEvent("go");
  });

  it("are named in the withheld field of the record holding them (HTTP API and CLI --json); a user's text is not", async () => {
    const t = tempDir("cairn-h7-withheld-");
    const path = join(t.dir, "cairn.db");
    const k1 = { id: "k1", key: randomBytes(32).toString("base64") };
    const keyless = createEngine({ store: sqliteStore(path), worker: false });
    // A run the keyless client started and canceled with a reason that reads like a
    // placeholder, before the store is marked encrypted (after, the reason would be refused).
    await keyless.start(waits, undefined, { id: "user-text" });
    await keyless.cancel("user-text", ENCRYPTED_TEXT);
    const workers = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k1] }),
      workflows: [fails, waits, asks],
      pollIntervalMs: 10,
    });
    try {
      await workers.start(fails, undefined, { id: "fail-enc" });
      await workers.start(waits, undefined, { id: "cancel-enc" });
      await workers.start(asks, undefined, { id: "asks-enc" });
      await until(async () => (await workers.getRun("fail-enc"))?.status === "failed", "fails");
      for (const id of ["cancel-enc", "asks-enc"]) {
        await until(async () => (await workers.getRun(id))?.status === "waiting", `${id} waits`);
      }
      await workers.cancel("cancel-enc", "operator stop");
      await workers.approve("asks-enc", "ship", { comment: "fine by me" });

      const app = createHttpApp({ engine: keyless, token: TOKEN });
      const get = async (url: string) => {
        const res = await call(app.fetch, "GET", url, { headers: auth });
        expect(res.status, url).toBe(200);
        return res.body as Json;
      };
      const canceled = (await get("/api/runs/cancel-enc")).run as Json;
      expect(canceled.reason).toBe(ENCRYPTED_TEXT);
      expect(canceled.withheld).toEqual({ input: K1, reason: K1 });
      const userText = (await get("/api/runs/user-text")).run as Json;
      expect(userText.reason).toBe(ENCRYPTED_TEXT);
      expect(userText.withheld).toBeUndefined();

      const failed = (await get("/api/runs/fail-enc")).run as Json;
      const runError = failed.error as Json;
      expect(runError.message).toBe(ENCRYPTED_TEXT);
      expect(runError.withheld).toEqual({ message: K1 });

      const listed = (await get("/api/runs")).runs as Json[];
      expect(listed.find((r) => r.id === "cancel-enc")?.withheld).toEqual({ reason: K1 });
      expect(listed.find((r) => r.id === "user-text")?.withheld).toBeUndefined();
      expect((listed.find((r) => r.id === "fail-enc")!.error as Json).withheld).toEqual({
        message: K1,
      });

      const steps = (await get("/api/runs/fail-enc/steps")).steps as Json[];
      const work = steps.find((s) => s.key === "work")!;
      const stepError = work.error as Json;
      expect(stepError.message).toBe(ENCRYPTED_TEXT);
      expect((stepError.withheld as Json).message).toEqual(K1);
      const attemptError = (work.attempts as Json[])[0]?.error as Json;
      expect(attemptError.message).toBe(ENCRYPTED_TEXT);
      expect((attemptError.withheld as Json).message).toEqual(K1);

      const approvals = (await get("/api/runs/asks-enc/approvals")).approvals as Json[];
      expect(approvals[0]?.comment).toBe(ENCRYPTED_TEXT);
      expect(approvals[0]?.withheld).toEqual({ request: K1, comment: K1 });

      // The dashboard shows withheld text as a tag, a person's own text as itself.
      const page = async (url: string) => {
        const res = await call(app.fetch, "GET", url, { headers: auth });
        expect(res.status, url).toBe(200);
        return res.body as unknown as string;
      };
      const TAG = /<span class="tag warn" title="[^"]*">encrypted with key "k1"<\/span>/;
      expect(await page("/runs/cancel-enc")).toMatch(TAG);
      expect(await page("/runs/fail-enc")).toMatch(TAG);
      const userPage = await page("/runs/user-text");
      expect(userPage).not.toMatch(TAG);
      expect(userPage).toContain("[encrypted with key &quot;k1&quot;]");

      // The CLI's --json says the same.
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const cli = async (args: string[]) => {
        const res = await cairn(args, env);
        expect(res.code, res.stderr).toBe(0);
        return JSON.parse(res.stdout) as Json;
      };
      expect(((await cli(["show", "cancel-enc", "--json"])).run as Json).withheld).toEqual({
        input: K1,
        reason: K1,
      });
      expect(((await cli(["show", "user-text", "--json"])).run as Json).withheld).toBeUndefined();
      const shownFail = await cli(["show", "fail-enc", "--json"]);
      expect(((shownFail.run as Json).error as Json).withheld).toEqual({ message: K1 });
      const shownWork = (shownFail.steps as Json[]).find((s) => s.key === "work")!;
      expect(((shownWork.error as Json).withheld as Json).message).toEqual(K1);
      const shownAsks = await cli(["show", "asks-enc", "--json"]);
      expect((shownAsks.approvals as Json[])[0]?.withheld).toEqual({ request: K1, comment: K1 });
      const runsRes = await cairn(["runs", "--json"], env);
      expect(runsRes.code, runsRes.stderr).toBe(0);
      const runsListed = JSON.parse(runsRes.stdout) as Json[] | { runs: Json[] };
      const rows = Array.isArray(runsListed) ? runsListed : runsListed.runs;
      expect(rows.find((r) => r.id === "cancel-enc")?.withheld).toEqual({ input: K1, reason: K1 });
      expect(rows.find((r) => r.id === "user-text")?.withheld).toBeUndefined();
    } finally {
      await keyless.close();
      await workers.close();
      t.cleanup();
    }
  });

  it("an approval's undecodable request is named withheld, not only shown as the placeholder text", async () => {
    const t = tempDir("cairn-h7-undecodable-");
    const path = join(t.dir, "cairn.db");
    const engine = createEngine({
      store: sqliteStore(path),
      workflows: [asks],
      pollIntervalMs: 10,
    });
    try {
      await engine.start(asks, undefined, { id: "asks" });
      await until(async () => (await engine.getRun("asks"))?.status === "waiting", "asks waits");
      const db = new Database(path);
      // A damaged envelope header: no key can read it.
      db.prepare("UPDATE approvals SET request = 'cairn:enc:9:zz' WHERE run_id = 'asks'").run();
      db.close();
      const app = createHttpApp({ engine, token: TOKEN });
      const res = await call(app.fetch, "GET", "/api/runs/asks/approvals", { headers: auth });
      const approval = (res.body as { approvals: Json[] }).approvals[0]!;
      expect(approval.request).toBe("[undecodable value]");
      expect(approval.withheld).toEqual({ request: { reason: "undecodable" } });
      // The run page's Approve dialog shows the request as withheld, not as that text.
      const page = (await call(app.fetch, "GET", "/runs/asks", { headers: auth }))
        .body as unknown as string;
      expect(page).toMatch(/<span class="tag warn" title="[^"]*">undecodable<\/span>/);
      expect(page).not.toContain("[undecodable value]");
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

describe("run page actions: the reason an action is disabled", () => {
  const asks = workflow({ name: "h7-asks-once", version: "1" }, async (ctx) => {
    await ctx.approval("ship", { request: "ship it?", timeout: "1h" });
  });

  it("an approval answered while no worker has woken the run yet is not said to have passed its deadline", async () => {
    const t = tempDir("cairn-h7-answered-");
    const path = join(t.dir, "cairn.db");
    const worker = createEngine({
      store: sqliteStore(path),
      workflows: [asks],
      pollIntervalMs: 10,
    });
    const client = createEngine({ store: sqliteStore(path), worker: false });
    try {
      await worker.start(asks, undefined, { id: "asks" });
      await until(async () => (await worker.getRun("asks"))?.status === "waiting", "asks waits");
      await worker.close(); // no worker wakes the run after the answer
      await client.approve("asks", "ship", { by: "ana" });
      const app = createHttpApp({ engine: client, token: TOKEN });
      const res = await call(app.fetch, "GET", "/runs/asks", { headers: auth });
      const page = res.body as unknown as string;
      const refusals = [...page.matchAll(/<p class="muted action-refusal">([^<]*)<\/p>/g)].map(
        (m) => m[1]!,
      );
      expect(refusals.join(" ")).not.toMatch(/deadline/);
      expect(refusals.join(" ")).toMatch(/already answered/);
      // The API refuses a second answer, as the page says.
      const again = await call(app.fetch, "POST", "/api/runs/asks/approvals/ship/approve", {
        headers: { ...auth, origin: "http://localhost" },
        body: {},
      });
      expect(again.status).toBe(409);
    } finally {
      await client.close();
      await worker.close();
      t.cleanup();
    }
  });
});

describe("approval link page", () => {
  it("over a closed engine answers 503 titled Unavailable, not 'Nothing to approve'", async () => {
    const t = tempDir("cairn-h7-closed-");
    const engine = createEngine({ store: sqliteStore(join(t.dir, "cairn.db")), worker: false });
    try {
      const app = createHttpApp({ engine });
      await engine.close();
      const res = await call(app.fetch, "GET", "/approvals/some-token");
      expect(res.status).toBe(503);
      const page = res.body as unknown as string;
      expect(page).toContain("<h1>Unavailable</h1>");
      expect(page).not.toContain("Nothing to approve");
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});
