// `cairn check-replay` and `cairn ui --module` load a module "like cairn worker does", but
// took no --import: a TypeScript module, loaded by `cairn worker --import tsx m.ts`,
// could not be checked or served the same way ("Unknown option '--import'"). Both take it
// now, imported before the module, as the worker does. (The CLI here runs under tsx, so a
// prelude of the test's own stands for the loader: the module refuses to load without it.)

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure, ROOT, startCairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const INDEX = join(ROOT, "src/index.ts");

describe("--import for check-replay and ui --module", () => {
  const dir = tempDir("cairn-import-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  const prelude = join(dir.dir, "prelude.mjs");
  const modulePath = join(dir.dir, "workflows.mjs");
  const running: Array<ReturnType<typeof startCairn>> = [];

  beforeAll(async () => {
    const hello = workflow({ name: "hello", version: "1" }, async (ctx) =>
      ctx.step("say", () => "hi"),
    );
    const engine = createEngine({ store: sqliteStore(db), workflows: [hello], pollIntervalMs: 10 });
    await (await engine.start(hello, undefined, { id: "hello-1" })).result();
    await engine.close();
    writeFileSync(prelude, "globalThis.cairnPrelude = 'loaded';\n");
    writeFileSync(
      modulePath,
      `import { workflow } from ${JSON.stringify(pathToFileURL(INDEX).href)};
if (globalThis.cairnPrelude !== "loaded") throw new Error("the prelude was not imported first");
export const hello = workflow({ name: "hello", version: "1" }, async (ctx) => ctx.step("say", () => "hi"));
`,
    );
  });
  afterAll(() => {
    for (const r of running) if (r.child.exitCode === null) r.child.kill("SIGKILL");
    dir.cleanup();
  });

  it("check-replay --import imports it before the module", async () => {
    const res = await cairn(
      ["check-replay", modulePath, "--import", prelude, "--run", "hello-1", "--json"],
      env,
    );
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout)).toMatchObject([{ runId: "hello-1", verdict: "ok" }]);
    expectFailure(await cairn(["check-replay", modulePath], env), 1, /prelude was not imported/);
  });

  it("ui --module --import imports it before the module", async () => {
    const ui = startCairn(["ui", "--port", "0", "--module", modulePath, "--import", prelude], env);
    running.push(ui);
    await until(
      () => ui.output.stdout.includes("Stop with Ctrl+C") || ui.child.exitCode !== null,
      "started or stopped",
    );
    expect(ui.output.stderr).toBe("");
    expect(ui.output.stdout).toContain("Can start runs of: hello@1");
    ui.child.kill("SIGTERM");
    expect((await ui.done).code).toBe(0);
    expectFailure(
      await cairn(["ui", "--port", "0", "--import", prelude], env),
      2,
      /--import loads what a --module needs/,
    );
  });
});
