// `cairn result --wait` and `cairn start --wait` as an adversary uses them: a --timeout past
// what one setTimeout holds (2^31-1 ms, about 24.8 days), and the --json outcome of a run
// whose output this process cannot read.

import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, encryptedStore, sqliteStore, workflow } from "../src/index.js";
import { cairn, startCairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const gated = workflow({ name: "gated", version: "1" }, async (ctx, input: { n: number }) => {
  const go = await ctx.waitForEvent<{ extra: number }>("go");
  return { total: input.n + (go.timedOut ? 0 : go.payload.extra) };
});

describe("cairn result / start --wait, hostile use", () => {
  const dir = tempDir("cairn-result-");
  const path = join(dir.dir, "cairn.db");
  const store = ["--store", `sqlite:${path}`];
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(path), workflows: [gated], pollIntervalMs: 20 });
    await engine.listRuns();
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("--timeout 30d waits (one setTimeout of 30 days fired after 1 ms: exit 3 at once)", async () => {
    const child = startCairn([
      "start",
      "gated@1",
      "--input",
      '{"n": 1}',
      "--id",
      "long-wait",
      "--wait",
      "--timeout",
      "30d",
      ...store,
    ]);
    // The event goes only once the CLI waits: the run cannot have ended before the wait.
    await until(() => child.output.stderr.includes("Waiting for it to finish"), "the wait");
    await until(async () => (await engine.getRun("long-wait"))?.status === "waiting", "waiting");
    await engine.sendEvent("long-wait", "go", { extra: 41 });
    const res = await child.done;
    expect(res.stderr).not.toMatch(/TimeoutOverflowWarning|has not finished/);
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout)).toEqual({ total: 42 });
  });

  it("--json: an output encrypted with a key not given exits 1 as without --json (it exited 0)", async () => {
    const k = { id: "k1", key: randomBytes(32).toString("base64") };
    const encPath = join(dir.dir, "encrypted.db");
    const enc = createEngine({
      store: encryptedStore(sqliteStore(encPath), { keys: [k] }),
      workflows: [gated],
      pollIntervalMs: 20,
    });
    try {
      const run = await enc.start(gated, { n: 1 }, { id: "secret-1" });
      await until(async () => (await enc.getRun("secret-1"))?.status === "waiting", "waiting");
      await enc.sendEvent("secret-1", "go", { extra: 0 });
      await run.result();
    } finally {
      await enc.close();
    }
    const encStore = ["--store", `sqlite:${encPath}`];
    // Without --json: refused, exit 1 (h5's test). With --json the exit code was 0 and
    // "output" the placeholder's text: `cairn result --json | jq .output` read it as the
    // string the run returned.
    const res = await cairn(["result", "secret-1", "--json", ...encStore]);
    expect(res.code, res.stderr).toBe(1);
    expect(res.stderr).toMatch(
      /^cairn: the output of run "secret-1" is encrypted \(key "k1"\) and \$CAIRN_ENCRYPTION_KEYS does not hold that key/,
    );
    // Still one JSON document on stdout, the placeholder marked as withheld.
    expect(JSON.parse(res.stdout)).toMatchObject({
      id: "secret-1",
      status: "completed",
      withheld: { output: { reason: "encrypted", keyId: "k1" } },
    });
    const keyed = await cairn(["result", "secret-1", "--json", ...encStore], {
      CAIRN_ENCRYPTION_KEYS: `k1=${k.key}`,
    });
    expect(keyed.code, keyed.stderr).toBe(0);
    expect(JSON.parse(keyed.stdout)).toEqual({
      id: "secret-1",
      status: "completed",
      output: { total: 1 },
    });
  });

  it("a --timeout too long is refused naming it as given, not as the number it rounds to", async () => {
    const res = await cairn([
      "result",
      "x",
      "--wait",
      "--timeout",
      "99999999999999999999",
      ...store,
    ]);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(
      /^cairn: --timeout: "99999999999999999999" is longer than 100,000 years/,
    );
    const days = await cairn(["result", "x", "--wait", "--timeout", "1000000000000000d", ...store]);
    expect(days.stderr).toMatch(
      /^cairn: --timeout: "1000000000000000d" is longer than 100,000 years/,
    );
  });
});
