// A 400 VALIDATION names the body property it refuses, cut to 100 characters (its issues'
// paths to 200): the cut fell inside a surrogate pair when an emoji straddled it, and the
// message carried a lone surrogate ("\ud83c" in the JSON; U+FFFD wherever it is shown).
// The cuts now keep whole characters (route.ts, errors.ts), as quote() already did.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { isWellFormed } from "../src/lib/text.js";
import { tempDbPath } from "./helpers/sqlite.js";

const wf = workflow({ name: "cut", version: "1" }, async () => "ok");

// A schema whose issue has a long path and message, each with an emoji across its cut
// (the path at 200, the message at 500).
const KEY = `${"k".repeat(198)}🎉`;
const refusing = workflow(
  {
    name: "cut-schema",
    version: "1",
    input: {
      "~standard": {
        version: 1 as const,
        vendor: "acme",
        validate: () => ({
          issues: [{ path: [KEY], message: `${"m".repeat(499)}🎉 more` }],
        }),
      },
    },
  },
  async () => "ok",
);

describe("HTTP: a refused property's name cut in its message", () => {
  const db = tempDbPath();
  let engine: Engine;
  beforeAll(() => {
    engine = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf, refusing],
      worker: false,
    });
  });
  afterAll(async () => {
    await engine.close();
    db.cleanup();
  });

  it("keeps whole characters", async () => {
    const app = createHttpApp({ engine });
    // "/" + 98 characters, then an emoji at 99-100: a cut at 100 splits it.
    const property = `${"x".repeat(98)}🎉`;
    const res = await app.hono.request("http://127.0.0.1/api/runs", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ workflow: "cut", [property]: 1 }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; issues: { path: string }[] } };
    expect(isWellFormed(body.error.message)).toBe(true);
    expect(body.error.message).toBe(`body/${"x".repeat(98)} is not an allowed property`);
    expect(body.error.issues[0]?.path).toBe(`/${property}`);
  });

  it("an input schema's issues too", async () => {
    const app = createHttpApp({ engine });
    const res = await app.hono.request("http://127.0.0.1/api/runs", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ workflow: "cut-schema", input: {} }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as {
      error: { issues: { path: string; message: string }[] };
    };
    const issue = body.error.issues[0];
    expect(issue?.path).toBe(`/${"k".repeat(198)}`);
    expect(issue?.message).toBe("m".repeat(499));
  });
});
