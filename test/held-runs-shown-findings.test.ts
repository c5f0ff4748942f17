// a held run says so (Release's heldFor: released while a step body of it still ran in
// its worker; no other worker takes it until the hold ends). Before: `cairn runs`, `cairn
// show`, getRun and the HTTP API's run said nothing of it: a resumed run sat pending with
// live workers serving it, and nothing told why.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, type Store, sqliteStore } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { call } from "./helpers/http.js";
import { tempDir } from "./helpers/sqlite.js";

const HOLD_MS = 3_600_000;

describe("a run held for a step body still running in its worker", () => {
  let dir: ReturnType<typeof tempDir>;
  let db: string;
  let store: Store;
  let client: Engine;
  let heldUntil: number;

  beforeAll(async () => {
    dir = tempDir();
    db = `${dir.dir}/cairn.db`;
    store = sqliteStore(db);
    await store.open({ clock: { now: () => Date.now() } as never });
    await store.createRun({
      id: "r",
      workflow: "w",
      version: "1",
      input: "[null]",
      budgetLimit: {},
    });
    const [claimed] = await store.claimRuns({
      workerId: "wrk_body",
      workflows: ["w@1"],
      limit: 1,
      leaseMs: 30_000,
    });
    const out = await store.releaseRun({
      runId: "r",
      epoch: claimed!.run.epoch,
      status: "failed",
      error: { name: "Error", message: "bad input" },
      readyAt: null,
      heldFor: { workerId: "wrk_body", ms: HOLD_MS },
    });
    if (!out.ok) throw new Error("release lost");
    heldUntil = out.run.heldUntil ?? (await store.getRun("r"))!.heldUntil!;
    client = createEngine({ store: sqliteStore(db), worker: false });
  });
  afterAll(async () => {
    await client?.close();
    await store?.close();
    dir?.cleanup();
  });

  it("getRun says which worker holds it and until when", async () => {
    const run = await client.getRun("r");
    expect(run?.heldBy).toBe("wrk_body");
    expect(run?.heldUntil?.getTime()).toBe(heldUntil);
  });

  it("the HTTP API's run and list say it too", async () => {
    const app = createHttpApp({ engine: client });
    try {
      const one = await call<{ run: Record<string, unknown> }>(app.fetch, "GET", "/api/runs/r");
      expect(one.body.run).toMatchObject({
        heldBy: "wrk_body",
        heldUntil: new Date(heldUntil).toISOString(),
      });
      const list = await call<{ runs: Array<Record<string, unknown>> }>(
        app.fetch,
        "GET",
        "/api/runs",
      );
      expect(list.body.runs[0]).toMatchObject({ id: "r", heldBy: "wrk_body" });
    } finally {
      app.close();
    }
  });

  it("`cairn runs` and `cairn show` say it", async () => {
    const env = { CAIRN_STORE: `sqlite:${db}` };
    const at = new Date(heldUntil).toISOString();
    const runs = await cairn(["runs"], env);
    expect(runs.code, runs.stderr).toBe(0);
    expect(runs.stdout).toContain(`held by wrk_body until ${at}; Error: bad input`);
    const json = await cairn(["runs", "--json"], env);
    expect(JSON.parse(json.stdout)[0]).toMatchObject({ heldBy: "wrk_body", heldUntil: at });
    const show = await cairn(["show", "r"], env);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(
      new RegExp(`held\\s+wrk_body until ${at.replace(/\./g, "\\.")} \\(a step body`),
    );
  });
});
