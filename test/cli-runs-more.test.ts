// `cairn runs` said "(the N most recent shown; --limit N shows more)" whenever the page was
// full, also when exactly N runs matched and there was nothing more to show: a user raised
// --limit and found the same runs. It now asks for one run more than it shows and says so
// only when that one exists (runs.ts), also for a --workflow name@version filter.

import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath } from "./helpers/sqlite.js";

const wf = workflow({ name: "more", version: "1" }, async (ctx) => ctx.waitForEvent("go"));
const MORE = "more match: the next page is --cursor";

describe("cairn runs: the 'shows more' line", () => {
  const db = tempDbPath();
  afterAll(() => db.cleanup());

  it("appears only when more runs match than are shown", async () => {
    const engine = createEngine({ store: sqliteStore(db.path), workflows: [wf], worker: false });
    for (const id of ["r1", "r2", "r3"]) await engine.start(wf, undefined, { id });
    await engine.close();
    const store = ["--store", `sqlite:${db.path}`];

    const exact = await cairn(["runs", "--limit", "3", ...store]);
    expect(exact.code).toBe(0);
    expect(exact.stdout).toContain("r1");
    expect(exact.stdout).not.toContain(MORE);

    const exactVersion = await cairn(["runs", "--workflow", "more@1", "--limit", "3", ...store]);
    expect(exactVersion.stdout).toContain("r1");
    expect(exactVersion.stdout).not.toContain(MORE);

    const fewer = await cairn(["runs", "--limit", "2", ...store]);
    expect(fewer.stdout).not.toContain("r1");
    expect(fewer.stdout).toContain(`(2 shown, ${MORE} `);

    const fewerVersion = await cairn(["runs", "--workflow", "more@1", "--limit", "2", ...store]);
    expect(fewerVersion.stdout).toContain(`(2 shown, ${MORE} `);

    // --json prints the runs shown, no more.
    const json = await cairn(["runs", "--limit", "2", "--json", ...store]);
    expect((JSON.parse(json.stdout) as { id: string }[]).map((r) => r.id)).toEqual(["r3", "r2"]);
  });
});
