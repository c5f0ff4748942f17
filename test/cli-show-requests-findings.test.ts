// `cairn show` broke an approval's request into its fields whatever it was: a request
// encrypted with a key the CLI was not given (an EncryptedValue) showed as the "fields"
// `keyId k1` and `encrypted true`, not as `[encrypted with key "k1"]`, and a Map or a Date
// showed no field at all. Only a plain object is shown field by field now; anything else
// as a value, placeholders as what they say.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, encryptedStore, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const asks = workflow({ name: "asks", version: "1" }, async (ctx, input: { kind: string }) =>
  ctx.approval("merge", {
    request:
      input.kind === "map"
        ? new Map([["pr", 7]])
        : input.kind === "date"
          ? new Date(0)
          : { summary: "the plan" },
  }),
);

describe("cairn show of approval requests that are not plain objects (SQLite)", () => {
  const dir = tempDir("cairn-requests-");
  const plainDb = join(dir.dir, "plain.db");
  const encDb = join(dir.dir, "enc.db");
  const engines: Engine[] = [];

  async function asked(engine: Engine, id: string, kind: string) {
    await engine.start(asks, { kind }, { id });
    await until(async () => (await engine.listApprovals(id)).length === 1, `${id} asks`);
  }

  beforeAll(async () => {
    const plain = createEngine({
      store: sqliteStore(plainDb),
      workflows: [asks],
      pollIntervalMs: 20,
    });
    const key = { id: "k1", key: Buffer.alloc(32, 7).toString("base64") };
    const enc = createEngine({
      store: encryptedStore(sqliteStore(encDb), { keys: [key] }),
      workflows: [asks],
      pollIntervalMs: 20,
    });
    engines.push(plain, enc);
    await asked(plain, "map-1", "map");
    await asked(plain, "date-1", "date");
    await asked(plain, "obj-1", "object");
    await asked(enc, "enc-1", "object");
  });
  afterAll(async () => {
    for (const e of engines) await e.close();
    dir.cleanup();
  });

  const requestLines = (stdout: string) =>
    stdout.slice(stdout.indexOf("Approvals (1):"), stdout.indexOf("    asked"));

  it("an encrypted request read without its key shows as the placeholder", async () => {
    const res = await cairn(["show", "enc-1", "--store", encDb]);
    expect(res.code, res.stderr).toBe(0);
    expect(requestLines(res.stdout)).toContain('request   [encrypted with key "k1"]');
    expect(res.stdout).not.toMatch(/keyId|encrypted\s+true/);
  });

  it("a Map and a Date show as values; a plain object still field by field", async () => {
    const map = await cairn(["show", "map-1", "--store", plainDb]);
    expect(requestLines(map.stdout)).toContain('request   {"pr":7}');
    const date = await cairn(["show", "date-1", "--store", plainDb]);
    expect(requestLines(date.stdout)).toContain('request   "1970-01-01T00:00:00.000Z"');
    const obj = await cairn(["show", "obj-1", "--store", plainDb]);
    expect(requestLines(obj.stdout)).toMatch(/ {4}request\n {6}summary {5}the plan/);
  });
});
