// `cairn start --id X` of an id that exists with another input told a CLI user to "follow
// the existing run with engine.handle("X")", advice for code (h6). It now says how to follow
// it from the command line: cairn show X. An id of another workflow keeps its own message.

import { join } from "node:path";
import { afterAll, beforeAll, describe, it } from "vitest";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDir } from "./helpers/sqlite.js";

const job = workflow({ name: "job", version: "1" }, async (ctx, n: number) =>
  ctx.step("s", () => n),
);

describe("cairn start of an existing id with another input (SQLite)", () => {
  const dir = tempDir("cairn-h6-conflict-");
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
});
