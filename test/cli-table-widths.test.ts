// `cairn runs` padded its columns by the text before the terminal escapes (main.ts turns a
// control character into "\u001b" on output): a run id holding ESC took one column when the
// widths were measured and six when printed, so that row's columns stood five places right
// of the others'. table() now escapes first (format.ts).

import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath } from "./helpers/sqlite.js";

const wf = workflow({ name: "table", version: "1" }, async (ctx) => ctx.step("s", () => 1));

describe("cairn runs: column widths", () => {
  const db = tempDbPath();
  afterAll(() => db.cleanup());

  it("are those of the text shown, control characters escaped", async () => {
    const engine = createEngine({ store: sqliteStore(db.path), workflows: [wf], worker: false });
    await engine.start(wf, undefined, { id: "plain-id" });
    await engine.start(wf, undefined, { id: "red\u001b[31mid" });
    await engine.close();

    const res = await cairn(["runs", "--store", `sqlite:${db.path}`]);
    expect(res.code, res.stderr).toBe(0);
    const lines = res.stdout.split("\n").filter((l) => l !== "");
    const rows = lines.filter((l) => l.startsWith("plain-id") || l.startsWith("red"));
    expect(rows).toHaveLength(2);
    expect(rows.find((l) => l.startsWith("red"))).toContain("red\\u001b[31mid");
    // The WORKFLOW column starts at the same place in the header and in every row.
    const at = lines[0]?.indexOf("WORKFLOW");
    expect(rows.map((l) => l.indexOf("table@1"))).toEqual([at, at]);
  });
});
