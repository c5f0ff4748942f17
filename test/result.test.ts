// A run's result from the command line (`temporal workflow result`, `dbos workflow get`):
// there was none; `cairn show` printed the output among everything else, for people. Now
// `cairn result <id>` prints the output as JSON on stdout (exit 0), a failed or canceled
// run's error on stderr (exit 1), says a run is not finished (exit 3), and `--wait` waits
// for it (`--timeout` bounds that); `cairn start ... --wait` starts a run and does the same.

import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, encryptedStore, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure, startCairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const gated = workflow({ name: "gated", version: "1" }, async (ctx, input: { n: number }) => {
  const doubled = await ctx.step("double", () => input.n * 2);
  const go = await ctx.waitForEvent<{ extra: number }>("go");
  return { total: doubled + (go.timedOut ? 0 : go.payload.extra), when: new Date(0) };
});
const broken = workflow({ name: "broken", version: "1" }, async (ctx) => {
  await ctx.step(
    "fail",
    () => {
      throw new Error("the tool said no");
    },
    { retry: { maxAttempts: 1 } },
  );
});
const silent = workflow({ name: "silent", version: "1" }, async () => {});

describe("cairn result and cairn start --wait", () => {
  const dir = tempDir("cairn-result-");
  const path = join(dir.dir, "cairn.db");
  const store = ["--store", `sqlite:${path}`];
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(path),
      workflows: [gated, broken, silent],
      pollIntervalMs: 20,
    });
    await engine.listRuns();
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("a completed run: its output as JSON on stdout, exit 0", async () => {
    const run = await engine.start(gated, { n: 4 }, { id: "done-1" });
    await until(async () => (await engine.getRun("done-1"))?.status === "waiting", "waiting");
    await engine.sendEvent("done-1", "go", { extra: 1 });
    await run.result();
    const res = await cairn(["result", "done-1", ...store]);
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout)).toEqual({ total: 9, when: "1970-01-01T00:00:00.000Z" });
    expect(res.stderr).toBe("");
    const json = await cairn(["result", "done-1", "--json", ...store]);
    expect(JSON.parse(json.stdout)).toEqual({
      id: "done-1",
      status: "completed",
      output: { total: 9, when: "1970-01-01T00:00:00.000Z" },
    });
  });

  it("a run that returned nothing prints null", async () => {
    await engine.start(silent, undefined, { id: "silent-1" }).then((h) => h.result());
    const res = await cairn(["result", "silent-1", ...store]);
    expect(res.code).toBe(0);
    expect(res.stdout.trim()).toBe("null");
  });

  it("a failed run: its error on stderr, exit 1; canceled: its reason", async () => {
    await engine
      .start(broken, undefined, { id: "broken-1" })
      .then((h) => h.result())
      .catch(() => {});
    expectFailure(
      await cairn(["result", "broken-1", ...store]),
      1,
      /^cairn: run "broken-1" failed: Error: the tool said no\n.*cairn show broken-1/,
    );
    const json = await cairn(["result", "broken-1", "--json", ...store]);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toMatchObject({
      id: "broken-1",
      status: "failed",
      error: { name: "Error", message: "the tool said no" },
    });
    await engine.start(gated, { n: 1 }, { id: "canceled-1" });
    await engine.cancel("canceled-1", "not needed");
    await until(async () => (await engine.getRun("canceled-1"))?.status === "canceled", "canceled");
    expectFailure(
      await cairn(["result", "canceled-1", ...store]),
      1,
      /^cairn: run "canceled-1" was canceled: not needed/,
    );
  });

  it("a run not finished: exit 3 saying why; --wait --timeout gives up with exit 3", async () => {
    await engine.start(gated, { n: 1 }, { id: "open-1" });
    await until(async () => (await engine.getRun("open-1"))?.status === "waiting", "waiting");
    const now = await cairn(["result", "open-1", ...store]);
    expect(now.code).toBe(3);
    expect(now.stdout).toBe("");
    expect(now.stderr).toMatch(
      /^cairn: run "open-1" has not finished: it is waiting \(waiting for event "go"\); wait for it: cairn result open-1 --wait/,
    );
    const waited = await cairn(["result", "open-1", "--wait", "--timeout", "300ms", ...store]);
    expect(waited.code).toBe(3);
    expect(waited.stderr).toMatch(/has not finished after waiting 300ms: it is waiting/);
    const json = await cairn(["result", "open-1", "--json", ...store]);
    expect(json.code).toBe(3);
    expect(JSON.parse(json.stdout)).toEqual({
      id: "open-1",
      status: "waiting",
      why: 'waiting for event "go"',
    });
  });

  it("start --wait: the start said on stderr, then the output once the run finished", async () => {
    const child = startCairn([
      "start",
      "gated@1",
      "--input",
      '{"n": 20}',
      "--id",
      "waited-1",
      "--wait",
      ...store,
    ]);
    // Sent only once the CLI waits: the run cannot have finished before the wait began.
    await until(() => child.output.stderr.includes("Waiting for it to finish"), "the wait");
    expect(child.output.stderr).toContain('Started run "waited-1" of gated@1.');
    await until(async () => (await engine.getRun("waited-1"))?.status === "waiting", "waiting");
    await engine.sendEvent("waited-1", "go", { extra: 2 });
    const res = await child.done;
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout)).toEqual({ total: 42, when: "1970-01-01T00:00:00.000Z" });

    // Again under the id: nothing started, the result at once.
    const again = await cairn([
      "start",
      "gated@1",
      "--input",
      '{"n": 20}',
      "--id",
      "waited-1",
      "--wait",
      "--json",
      ...store,
    ]);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ created: false, status: "completed" });

    const failed = await cairn(["start", "broken@1", "--wait", ...store]);
    expect(failed.code).toBe(1);
    expect(failed.stdout).toBe("");
    expect(failed.stderr).toMatch(/cairn: run "run_[^"]+" failed: Error: the tool said no/);
  });

  it("--timeout without --wait is a usage error naming both", async () => {
    expectFailure(
      await cairn(["result", "open-1", "--timeout", "1s", ...store]),
      2,
      /--timeout bounds --wait; give --wait too/,
    );
    expectFailure(
      await cairn(["start", "gated@1", "--timeout", "1s", ...store]),
      2,
      /--timeout bounds --wait/,
    );
    expectFailure(await cairn(["result", "nope", ...store]), 1, /Run "nope" does not exist/);
  });

  it("an output encrypted with a key not given is refused, not printed as a string", async () => {
    const k = { id: "k1", key: randomBytes(32).toString("base64") };
    const encPath = join(dir.dir, "encrypted.db");
    const enc = createEngine({
      store: encryptedStore(sqliteStore(encPath), { keys: [k] }),
      workflows: [silent, gated],
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
    const plain = await cairn(["result", "secret-1", ...encStore]);
    expectFailure(
      plain,
      1,
      /the output of run "secret-1" is encrypted \(key "k1"\) and \$CAIRN_ENCRYPTION_KEYS does not hold that key/,
    );
    const keyed = await cairn(["result", "secret-1", ...encStore], {
      CAIRN_ENCRYPTION_KEYS: `k1=${k.key}`,
    });
    expect(keyed.code, keyed.stderr).toBe(0);
    expect(JSON.parse(keyed.stdout)).toEqual({ total: 2, when: "1970-01-01T00:00:00.000Z" });
  });
});
