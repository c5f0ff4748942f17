// `cairn check-replay` printed a diverged run's detail in a table column cut at 120
// characters: "... the journal recorded step "plan" (key "plan", call #1), which the code did
// not …", cut before it says what the code called instead, the one thing the reader needs.
// Each run not ok now gets its detail whole on a line of its own under the table
// (check-replay.ts); --json was whole already.

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDir } from "./helpers/sqlite.js";

const INDEX = fileURLToPath(new URL("../src/index.ts", import.meta.url));
const greet = workflow({ name: "greet-long", version: "1" }, async (ctx) =>
  ctx.step("a-step-with-a-long-enough-name", () => "hi"),
);

describe("cairn check-replay: a divergence's detail", () => {
  const dir = tempDir("cairn-check-replay-detail-");
  afterAll(() => dir.cleanup());

  it("is printed whole for each run not ok", async () => {
    const db = join(dir.dir, "cairn.db");
    const engine = createEngine({ store: sqliteStore(db), workflows: [greet] });
    await (await engine.start(greet, undefined, { id: "g1" })).result();
    await engine.close();
    const module = join(dir.dir, "changed.mjs");
    writeFileSync(
      module,
      `import { workflow } from ${JSON.stringify(pathToFileURL(INDEX).href)};
export const greet = workflow({ name: "greet-long", version: "1" }, async (ctx) =>
  ctx.step("renamed-step", () => { throw new Error("a replay check executes nothing"); }));
`,
    );
    const res = await cairn(["check-replay", module, "--store", `sqlite:${db}`]);
    expect(res.code, res.stderr).toBe(1);
    expect(res.stdout).toContain(
      '\nNot ok (1):\n  "g1" diverged: Run "g1" no longer matches its journal: the journal recorded step "a-step-with-a-long-enough-name"',
    );
    expect(res.stdout).toContain('it called step "renamed-step" (key "renamed-step") instead');
  });
});
