// A parent awaiting ctx.child waits for cairn's own event "cairn.child:<child id>", which
// nobody sends. `cairn runs` and `cairn show` said `waiting for event "cairn.child:p/kid"`,
// `cairn send`'s warning named it as an event to send, and the dashboard's runs list
// tagged the parent "needs input". They now say it waits for child run "p/kid".

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const kid = workflow({ name: "kid", version: "1" }, async (ctx) => ctx.waitForEvent("go"));
const parent = workflow({ name: "parent", version: "1" }, async (ctx) =>
  ctx.child("helper", kid, undefined),
);

describe("a parent waiting for its child (SQLite)", () => {
  const dir = tempDir("cairn-child-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [kid, parent], pollIntervalMs: 20 });
    await engine.start(parent, undefined, { id: "p" });
    await until(
      async () => (await engine.getRun("p"))?.waitingFor?.length === 1,
      "the parent waits for its child",
    );
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it('cairn runs and show say it waits for child run "p/helper"', async () => {
    const runs = await cairn(["runs", "--json"], env);
    expect(runs.code, runs.stderr).toBe(0);
    const why = (JSON.parse(runs.stdout) as Array<{ id: string; why: string }>).find(
      (r) => r.id === "p",
    )?.why;
    expect(why).toBe('waiting for child run "p/helper"');
    const shown = await cairn(["show", "p"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/why\s+waiting for child run "p\/helper"/);
    expect(shown.stdout).toMatch(/waiting for\s+child run "p\/helper"/);
    expect(shown.stdout).not.toContain("cairn.child:");
  });

  it("cairn send's warning names the child run, not an event to send", async () => {
    const sent = await cairn(["send", "p", "go"], env);
    expect(sent.code, sent.stderr).toBe(0);
    expect(sent.stderr).toContain(
      'is waiting for child run "p/helper" (it goes on when that run finishes), not "go"',
    );
  });

  it("the dashboard's runs list tags it a child wait, not input needed", async () => {
    const app = createHttpApp({ engine });
    try {
      const res = await app.hono.request("http://127.0.0.1/", { headers: { host: "127.0.0.1" } });
      expect(res.status).toBe(200);
      const page = await res.text();
      const from = page.indexOf('<tr data-run="p"');
      const row = page.slice(from, page.indexOf("</tr>", from));
      expect(row).toContain("waits for child run <code>p/helper</code>");
      expect(row).not.toContain("needs input");
      expect(page).not.toContain("cairn.child:");
    } finally {
      app.close();
    }
  });
});
