// An empty JSON value on the command line (`printf '' | cairn send id go -`, `--input ''`)
// was refused as "not valid JSON (quote strings: ...)": a reader looked for a typo in text
// that was never there (an empty pipe, an unset shell variable). It now says the value is
// empty (flag-values.ts).

import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDbPath } from "./helpers/sqlite.js";

const wf = workflow({ name: "empty", version: "1" }, async (ctx) => ctx.waitForEvent("go"));

describe("cairn: an empty JSON value", () => {
  const db = tempDbPath();
  afterAll(() => db.cleanup());

  it("is said to be empty, and nothing is done", async () => {
    const engine = createEngine({ store: sqliteStore(db.path), workflows: [wf], worker: false });
    await engine.start(wf, undefined, { id: "e1" });
    const store = ["--store", `sqlite:${db.path}`];

    expectFailure(
      await cairn(["send", "e1", "go", "-", ...store], {}, ""),
      2,
      /^cairn: the payload of event "go" is empty; give JSON \(quote strings/,
    );
    expectFailure(
      await cairn(["start", "empty@1", "--input", " ", "--id", "e2", ...store]),
      2,
      /^cairn: --input is empty; give JSON/,
    );
    expect(await engine.listEvents("e1")).toEqual([]);
    expect(await engine.getRun("e2")).toBeUndefined();
    await engine.close();
  });
});
