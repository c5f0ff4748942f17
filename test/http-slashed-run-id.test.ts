// A child run's id holds "/" ("parent/key"). Asked for with the id as it is,
// GET /api/runs/a1/sub matched no route and was answered "No API route ..." (the dashboard's
// /runs/a1/sub: "Nothing here"), saying nothing of why: the id is one path segment, its "/"
// written %2F. The 404 now says so, with the path meant (app.ts), under a mount too.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const child = workflow({ name: "kid", version: "1" }, async () => "ok");
const parent = workflow({ name: "parent", version: "1" }, async (ctx) =>
  ctx.child("sub", child, undefined),
);

describe("HTTP: a run id holding '/' sent unencoded", () => {
  const db = tempDbPath();
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db.path), workflows: [parent, child] });
    const run = await engine.start(parent, undefined, { id: "a1" });
    await run.result();
  });
  afterAll(async () => {
    await engine.close();
    db.cleanup();
  });

  it("the API's 404 names the path with the id as one segment", async () => {
    const app = createHttpApp({ engine });
    const ask = async (path: string, method = "GET") => {
      const res = await app.hono.request(`http://127.0.0.1${path}`, { method });
      return { status: res.status, body: (await res.json()) as { error: { message: string } } };
    };
    const run = await ask("/api/runs/a1/sub");
    expect(run.status).toBe(404);
    expect(run.body.error.message).toBe(
      'No API route GET "/api/runs/a1/sub"; a run id holding "/" (a child run\'s, "parent/key") is one path segment, its "/" written %2F (encodeURIComponent): GET "/api/runs/a1%2Fsub"',
    );
    expect((await ask("/api/runs/a1%2Fsub")).status).toBe(200);
    const steps = await ask("/api/runs/a1/sub/steps");
    expect(steps.body.error.message).toContain(': GET "/api/runs/a1%2Fsub/steps"');
    expect((await ask("/api/runs/a1%2Fsub/steps")).status).toBe(200);
    // A path no id can mend says only what it said.
    expect((await ask("/api/nothing/here")).body.error.message).toBe(
      'No API route GET "/api/nothing/here"',
    );
  });

  it("under a base path, and on the dashboard's run page", async () => {
    const app = createHttpApp({ engine, basePath: "/cairn" });
    const api = await app.hono.request("http://127.0.0.1/cairn/api/runs/a1/sub");
    expect(((await api.json()) as { error: { message: string } }).error.message).toContain(
      ': GET "/cairn/api/runs/a1%2Fsub"',
    );
    const page = await app.hono.request("http://127.0.0.1/cairn/runs/a1/sub");
    expect(page.status).toBe(404);
    expect(await page.text()).toContain(
      "A run id holding &quot;/&quot; (a child run&#39;s, &quot;parent/key&quot;) is one path segment, its &quot;/&quot; written %2F (encodeURIComponent): GET &quot;/cairn/runs/a1%2Fsub&quot;.",
    );
  });
});
