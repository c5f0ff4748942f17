// Two messages that named the wrong thing. `--import nonexist` said "Cannot find package
// 'nonexist' imported from .../src/cli/load-workflows.ts": cairn's own file, as if the user
// had imported it from there; a relative path was even looked for beside that file. Now a
// package is named with the user's directory it was looked for from, a path is taken from
// that directory. And a start refused for its input's size (or schema) named the run id
// the engine had made for it, a run that was never created and that nobody had seen: it
// now names a run only when the caller gave its id.

import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure, ROOT } from "./helpers/cli.js";
import { tempDir } from "./helpers/sqlite.js";

const INDEX = join(ROOT, "src/index.ts");

describe("--import names the user's directory, not cairn's file", () => {
  const dir = tempDir("cairn-import-");
  afterAll(() => dir.cleanup());
  const modulePath = join(dir.dir, "wf.ts");
  writeFileSync(
    modulePath,
    `import { workflow } from ${JSON.stringify(pathToFileURL(INDEX).href)};
export const w = workflow({ name: "w", version: "1" }, async () => 1);
`,
  );
  const store = ["--store", `sqlite:${join(dir.dir, "cairn.db")}`];

  it("a package installed nowhere: names it and the directory it was looked for from", async () => {
    const res = await cairn(["worker", modulePath, "--import", "no-such-pkg-h5", ...store]);
    expectFailure(res, 1, /--import no-such-pkg-h5: cannot find it/);
    expect(res.stderr).toContain(`for the current directory (${JSON.stringify(resolve(ROOT))})`);
    expect(res.stderr).not.toContain("load-workflows");
  });

  it("a path that does not exist: looked for from the current directory", async () => {
    const res = await cairn(["worker", modulePath, "--import", "./no-such-file.mjs", ...store]);
    expectFailure(res, 1, /--import \.\/no-such-file\.mjs: no such file/);
    expect(res.stderr).toContain(JSON.stringify(join(ROOT, "no-such-file.mjs")));
    expect(res.stderr).not.toContain("load-workflows");
  });

  it("a module that imports a missing package keeps Node's message, naming that module", async () => {
    const prelude = join(dir.dir, "prelude.mjs");
    writeFileSync(prelude, 'import "no-such-dependency-h5";\n');
    const res = await cairn(["worker", modulePath, "--import", prelude, ...store]);
    expectFailure(res, 1, /cannot load it/);
    expect(res.stderr).toContain("no-such-dependency-h5");
    expect(res.stderr).toContain(prelude);
  });
});

describe("a start refused for its input names no run it never created", () => {
  const dir = tempDir("cairn-size-");
  afterAll(() => dir.cleanup());
  const wf = workflow({ name: "big", version: "1" }, async (_ctx, input: string) => input.length);

  it("engine.start: the id is named only when given", async () => {
    const engine = createEngine({
      store: sqliteStore(join(dir.dir, "engine.db")),
      workflows: [wf],
      worker: false,
      maxPayloadBytes: 1_000,
    });
    try {
      const unnamed = await engine.start(wf, "x".repeat(2_000)).catch((e: Error) => e);
      expect(unnamed).toBeInstanceOf(Error);
      expect((unnamed as Error).message).toMatch(/^Input for workflow "big@1" is \d+ bytes/);
      expect((unnamed as Error).message).not.toMatch(/run_/);
      const named = await engine.start(wf, "x".repeat(2_000), { id: "mine" }).catch((e) => e);
      expect((named as Error).message).toMatch(/^Input for workflow "big@1" \(run "mine"\) is/);
      expect(await engine.listRuns()).toEqual([]);
    } finally {
      await engine.close();
    }
  });

  it("cairn start: no run id in the refusal, and no run made", async () => {
    const path = join(dir.dir, "cli.db");
    const engine = createEngine({ store: sqliteStore(path), worker: false });
    await engine.listRuns();
    await engine.close();
    const input = JSON.stringify("x".repeat(2 * 1024 * 1024 + 10));
    const res = await cairn(
      ["start", "big@1", "--input", "-", "--store", `sqlite:${path}`],
      {},
      input,
    );
    expectFailure(
      res,
      1,
      /^cairn: Input for workflow "big@1" is \d+ bytes encoded, over the payload limit/,
    );
    expect(res.stderr).not.toMatch(/run_/);
    const listed = await cairn(["runs", "--json", "--store", `sqlite:${path}`]);
    expect(JSON.parse(listed.stdout)).toEqual([]);
  });
});
