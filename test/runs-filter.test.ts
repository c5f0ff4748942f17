// `cairn runs` showed the newest --limit runs and no more: no way to the next page (the
// HTTP API had a cursor), no filter by id (the API's `q`) or by parent. Now the last line of
// a page that has more gives the next page's cursor (--cursor; in --json each run carries
// its own), and --id-contains and --parent filter as the store does; --workflow name@version
// is filtered by the store too.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cursorFor } from "../src/http/api/run-list.js";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDir } from "./helpers/sqlite.js";

const v1 = workflow({ name: "page", version: "1" }, async (ctx) => ctx.waitForEvent("go"));
const v2 = workflow({ name: "page", version: "2" }, async (ctx) => ctx.waitForEvent("go"));

interface Listed {
  id: string;
  version: string;
  cursor: string;
  createdAt: string;
}

describe("cairn runs: pages, --id-contains, --parent", () => {
  const dir = tempDir("cairn-runs-");
  const path = join(dir.dir, "cairn.db");
  const store = ["--store", `sqlite:${path}`];
  const ids: string[] = [];
  beforeAll(async () => {
    const engine = createEngine({ store: sqliteStore(path), workflows: [v1, v2], worker: false });
    for (let i = 0; i < 7; i++) {
      const id = `batch-${i}`;
      ids.push(id);
      await engine.start(i % 2 === 0 ? v1 : v2, undefined, { id });
    }
    await engine.start(v1, undefined, { id: "other" });
    await engine.close();
  });
  afterAll(() => dir.cleanup());

  it("--json pages by the last run's cursor: every run once, newest first", async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    // Bounded: a cursor that led nowhere new would list the first page for ever.
    while (pages < 5) {
      const args = ["runs", "--json", "--limit", "3", ...(cursor ? ["--cursor", cursor] : [])];
      const res = await cairn([...args, ...store]);
      expect(res.code, res.stderr).toBe(0);
      const page = JSON.parse(res.stdout) as Listed[];
      pages += 1;
      seen.push(...page.map((r) => r.id));
      if (page.length < 3) break;
      cursor = page[page.length - 1]!.cursor;
    }
    expect(pages).toBe(3);
    expect(seen).toEqual(["other", ...[...ids].reverse()]);
  });

  it("the text's last line gives the next page, and its cursor lists the rest", async () => {
    const first = await cairn(["runs", "--limit", "5", ...store]);
    const cursor = /the next page is --cursor (\S+);/.exec(first.stdout)?.[1];
    expect(cursor).toBeDefined();
    const next = await cairn(["runs", "--limit", "5", "--cursor", cursor!, ...store]);
    expect(next.code).toBe(0);
    const listed = (text: string) => [...text.matchAll(/^(batch-\d|other)\b/gm)].map((m) => m[1]);
    expect([...listed(first.stdout), ...listed(next.stdout)]).toEqual([
      "other",
      ...[...ids].reverse(),
    ]);
    expect(next.stdout).not.toContain("--cursor");
  });

  it("a cursor of the HTTP API pages here too", async () => {
    const all = JSON.parse((await cairn(["runs", "--json", ...store])).stdout) as Listed[];
    const third = all[2]!;
    const api = cursorFor({ createdAt: new Date(third.createdAt), id: third.id });
    const res = await cairn(["runs", "--json", "--cursor", api, ...store]);
    expect((JSON.parse(res.stdout) as Listed[]).map((r) => r.id)).toEqual(
      all.slice(3).map((r) => r.id),
    );
  });

  it("--id-contains, with --workflow name@version, filters by the store", async () => {
    const res = await cairn([
      "runs",
      "--json",
      "--id-contains",
      "batch-",
      "--workflow",
      "page@2",
      ...store,
    ]);
    expect((JSON.parse(res.stdout) as Listed[]).map((r) => r.id)).toEqual([
      "batch-5",
      "batch-3",
      "batch-1",
    ]);
    const none = await cairn(["runs", "--id-contains", "nothing-like-it", ...store]);
    expect(none.stdout.trim()).toBe("No runs match.");
  });

  it("--parent lists a run's children", async () => {
    const kid = workflow({ name: "kid", version: "1" }, async () => 1);
    const parent = workflow({ name: "parent", version: "1" }, async (ctx) => {
      await ctx.child("k1", kid, undefined);
      return ctx.child("k2", kid, undefined);
    });
    const engine = createEngine({ store: sqliteStore(path), workflows: [kid, parent] });
    try {
      await (await engine.start(parent, undefined, { id: "mom" })).result();
    } finally {
      await engine.close();
    }
    const res = await cairn(["runs", "--json", "--parent", "mom", ...store]);
    expect((JSON.parse(res.stdout) as Listed[]).map((r) => r.id).sort()).toEqual([
      "mom/k1",
      "mom/k2",
    ]);
  });

  it("a cursor that is not one, or an empty --id-contains, is a usage error naming it", async () => {
    expectFailure(
      await cairn(["runs", "--cursor", "not-a-cursor", ...store]),
      2,
      /--cursor "not-a-cursor" is not a page cursor; give the one a page printed/,
    );
    expectFailure(
      await cairn(["runs", "--id-contains", "", ...store]),
      2,
      /--id-contains is empty/,
    );
  });
});
