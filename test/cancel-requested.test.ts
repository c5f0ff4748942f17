// A new user's cancel, twice. `cairn cancel a1` of a run canceled already printed
// 'Canceled run "a1".' again (exit 0) and dropped a new --reason without a word; it now says
// when and with which reason the run was canceled, and a reason it did not record fails the
// command (exit 1), as a second answer to an approval does. And while a cancel requested
// for a run executing on another worker waited for that worker, `cairn show`, `cairn runs`
// and the dashboard said "running on wrk_… (lease until …)" as if nothing had been asked:
// the request is stored (the run's cancelRequested and reason), and the views now say it.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, type Store, sqliteStore } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { call } from "./helpers/http.js";
import { tempDir, until } from "./helpers/sqlite.js";

const HOUR = 3_600_000;

describe("cairn cancel of a run canceled (or asked to be) already, and the views meanwhile", () => {
  const dir = tempDir("cairn-cancel-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let store: Store;
  let engine: Engine;

  beforeAll(async () => {
    store = sqliteStore(db);
    await store.open({ clock: { now: () => Date.now() } as never });
    const run = { workflow: "w", version: "1", input: "[null]", budgetLimit: {} };
    // r1 executes on another worker: a cancel is only requested, for that worker to act on.
    await store.createRun({ id: "r1", ...run });
    await store.claimRuns({ workerId: "wrk_other", workflows: ["w@1"], limit: 1, leaseMs: HOUR });
    // l1's worker is gone: its lease ended (1 ms) with the cancel asked.
    await store.createRun({ id: "l1", ...run });
    await store.claimRuns({ workerId: "wrk_gone", workflows: ["w@1"], limit: 1, leaseMs: 1 });
    expect((await store.requestCancel("l1", "stop l1")).state).toBe("requested");
    await store.createRun({ id: "a1", ...run });
    expect((await store.requestCancel("a1", "first reason")).state).toBe("canceled");
    expect((await store.requestCancel("r1", "stop it")).state).toBe("requested");
    engine = createEngine({ store: sqliteStore(db), workflows: [], worker: false });
  });
  afterAll(async () => {
    await engine?.close();
    await store?.close();
    dir.cleanup();
  });

  it("says a run was canceled already: when, and with which reason (exit 0)", async () => {
    const res = await cairn(["cancel", "a1"], env);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(
      /^Run "a1" was already canceled at \d{4}-\d\d-\d\dT\S+Z \(reason "first reason"\); nothing changed\.\n$/,
    );
  });

  it("refuses a new reason it did not record (exit 1), and keeps the first", async () => {
    const res = await cairn(["cancel", "a1", "--reason", "another"], env);
    expect(res.code).toBe(1);
    expect(res.stdout).toBe("");
    expect(res.stderr).toMatch(
      /^cairn: Run "a1" was already canceled at \S+ \(reason "first reason"\); the reason "another" was not recorded \(a run keeps the reason it was first canceled with\)\n$/,
    );
    expect((await store.getRun("a1"))?.reason).toBe("first reason");
  });

  it("says a cancel was requested already, and which worker it waits for", async () => {
    const res = await cairn(["cancel", "r1", "--reason", "another"], env);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(
      /^cairn: Cancel of run "r1" was already requested \(reason "stop it"\), waiting for worker wrk_other to stop it; the reason "another" was not recorded/,
    );
    const again = await cairn(["cancel", "r1"], env);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toBe(
      'Cancel of run "r1" was already requested (reason "stop it"), waiting for worker wrk_other to stop it; nothing changed.\n',
    );
    expect((await store.getRun("r1"))?.reason).toBe("stop it");
  });

  it("cairn show and cairn runs say the cancel waits for its worker, not 'running on'", async () => {
    const shown = await cairn(["show", "r1"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain(
      '  why         cancel requested (reason "stop it"), waiting for worker wrk_other to stop it\n',
    );
    expect(shown.stdout).not.toContain("running on");
    const listed = await cairn(["runs"], env);
    expect(listed.code, listed.stderr).toBe(0);
    const line = listed.stdout.split("\n").find((l) => l.startsWith("r1 "));
    // The table cuts a long cell short: its start says what matters.
    expect(line).toMatch(/^r1 +w@1 +running +cancel requested \(reason "stop it"\), waiting for/);
    expect(line).not.toContain("running on");
  });

  it("a requested cancel of a run whose lease ended is said too", async () => {
    const leaseUntil = (await store.getRun("l1"))?.leaseUntil ?? 0;
    await until(() => Date.now() > leaseUntil, "l1's lease ends");
    const shown = await cairn(["show", "l1", "--json"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect((JSON.parse(shown.stdout) as { why: string }).why).toMatch(
      /^cancel requested \(reason "stop l1"\) of a run on wrk_gone, whose lease ended \S+: no live worker serves w@1; the next one to serve it takes it over$/,
    );
  });

  it("the API says cancelRequested, and the dashboard's run page says the cancel waits", async () => {
    const app = createHttpApp({ engine });
    try {
      const api = await call<{ run: Record<string, unknown> }>(
        (q) => app.fetch(q),
        "GET",
        "/api/runs/r1",
      );
      expect(api.status).toBe(200);
      expect(api.body.run.cancelRequested).toBe(true);
      const other = await call<{ run: Record<string, unknown> }>(
        (q) => app.fetch(q),
        "GET",
        "/api/runs/a1",
      );
      expect(other.body.run.cancelRequested).toBeUndefined();
      const page = await app.fetch(new Request("http://localhost/runs/r1"));
      expect(page.status).toBe(200);
      const text = await page.text();
      expect(text).toMatch(
        /<p class="why s-running"><span class="tag warn">cancel requested<\/span> stop it <span class="muted">· waiting for its worker to stop it<\/span>/,
      );
    } finally {
      app.close();
    }
  });
});
