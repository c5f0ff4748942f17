// `cairn start --id X` (and POST /api/runs with an id) of an id that exists with another
// input told the user to "follow the existing run with engine.handle("X")", advice for code
// (not the CLI). The CLI now says to follow it with cairn show X, the API to read it at
// /api/runs/{id}. An id of another workflow keeps its own message.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDir } from "./helpers/sqlite.js";

const job = workflow({ name: "job", version: "1" }, async (ctx, n: number) =>
  ctx.step("s", () => n),
);

describe("cairn start of an existing id with another input (SQLite)", () => {
  const dir = tempDir("cairn-conflict-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [job], pollIntervalMs: 20 });
    await (await engine.start(job, 1, { id: "job-1" })).result();
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("says to follow it with cairn show, not engine.handle", async () => {
    const res = await cairn(["start", "job@1", "--id", "job-1", "--input", "2"], env);
    expectFailure(
      res,
      1,
      /^cairn: Run "job-1" already exists with a different input, and a run's input never changes: nothing was started\. Choose another --id, or follow that run with: cairn show job-1\n$/,
    );
    expectFailure(
      await cairn(["start", "other@1", "--id", "job-1", "--input", "2"], env),
      1,
      /Run id "job-1" already belongs to workflow "job"; it cannot be started as "other"/,
    );
  });

  it("POST /api/runs says to read it at /api/runs/{id} (409 RUN_CONFLICT)", async () => {
    const app = createHttpApp({ engine });
    try {
      const res = await app.hono.request("http://127.0.0.1/api/runs", {
        method: "POST",
        headers: { host: "127.0.0.1", "content-type": "application/json" },
        body: JSON.stringify({ workflow: "job", id: "job-1", input: 2 }),
      });
      expect(res.status).toBe(409);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("RUN_CONFLICT");
      expect(body.error.message).toContain("read that run (GET /api/runs/{id})");
      expect(body.error.message).not.toContain("engine.handle");
    } finally {
      app.close();
    }
  });
});
