// The CLI's values as the HTTP API has them: `cairn show` of a run whose output holds
// itself (a cycle), NaN, Infinity, bytes or a Map with non-string keys printed it as the
// API does, not as an "unexpected error" (the cycle) or as other values (null for NaN and
// Infinity, an object of indices for bytes, colliding keys for the Map); and a number in
// JSON given to the CLI (--input, an event's payload, --answer) that JSON.parse would turn
// into another one is refused before anything is stored, as the API refuses it (400).

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDir } from "./helpers/sqlite.js";

const odd = workflow({ name: "odd", version: "1" }, async (ctx) =>
  ctx.step("make", () => {
    const cyc: Record<string, unknown> = { a: 1 };
    cyc.self = cyc;
    return {
      cyc,
      nan: Number.NaN,
      inf: Number.NEGATIVE_INFINITY,
      bytes: new Uint8Array([1, 2, 3]),
      map: new Map<unknown, string>([
        [{ k: 1 }, "object key"],
        [2, "number key"],
      ]),
    };
  }),
);

const waits = workflow({ name: "waits", version: "1" }, async (ctx) => {
  await ctx.waitForEvent("go");
  return "done";
});

describe("the CLI's JSON values (SQLite)", () => {
  const dir = tempDir("cairn-values-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [odd, waits], pollIntervalMs: 20 });
    await (await engine.start(odd, undefined, { id: "odd-1" })).result();
    await engine.start(waits, undefined, { id: "waits-1" });
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  const expected = {
    cyc: { a: 1, self: "[Circular]" },
    nan: "NaN",
    inf: "-Infinity",
    bytes: [1, 2, 3],
    map: [
      [{ k: 1 }, "object key"],
      [2, "number key"],
    ],
  };

  it("show --json prints a cyclic output, NaN, Infinity, bytes and a Map as the API does", async () => {
    const res = await cairn(["show", "odd-1", "--json"], env);
    expect(res.stderr).toBe("");
    expect(res.code).toBe(0);
    const shown = JSON.parse(res.stdout);
    expect(shown.run.output).toEqual(expected);
    expect(shown.steps[0].result).toEqual(expected);
  });

  it("show prints them too, as text", async () => {
    const res = await cairn(["show", "odd-1"], env);
    expect(res.stderr).toBe("");
    expect(res.code).toBe(0);
    expect(res.stdout).toContain('"self": "[Circular]"');
    expect(res.stdout).toContain('"nan": "NaN"');
  });

  it("start --input with a number JSON.parse would change is a usage error; nothing starts", async () => {
    for (const [input, why] of [
      ["1e400", /the number 1e400, which cannot be stored as sent: it is out of range/],
      [
        '{"id": 9007199254740993}',
        /exact only up to 2\^53 - 1 \(it would become 9007199254740992\)/,
      ],
      ["[1e-400]", /it is too small \(it would become 0\)/],
    ] as const) {
      const res = await cairn(["start", "waits@1", "--input", input, "--id", "big-input"], env);
      expectFailure(res, 2, /^cairn: --input holds /);
      expect(res.stderr).toMatch(why);
    }
    expect(await engine.getRun("big-input")).toBeUndefined();
    // Numbers that read back as written still start.
    const ok = await cairn(
      ["start", "waits@1", "--input", "[1.5e10, 12345678901234567000]", "--id", "ok-input"],
      env,
    );
    expect(ok.code, ok.stderr).toBe(0);
    expect((await engine.getRun("ok-input"))?.input).toEqual([1.5e10, 12345678901234567000]);
  });

  it("send with such a number in the payload stores nothing", async () => {
    const res = await cairn(["send", "waits-1", "other", '{"n": 1e999}'], env);
    expectFailure(res, 2, /payload of event "other" holds the number 1e999/);
    expect(await engine.listEvents("waits-1")).toEqual([]);
  });
});
