// crashSweep({ crash: "process" }): each execution in child processes, SIGKILLed at the
// boundary, resumed by a fresh child; side effects counted across them by a ledger file.
// Kept small: each execution costs two Node processes.

import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { workflow } from "../src/index.js";
import { type Boundary, crashSweep, createSideEffectCounter } from "../src/testing/index.js";
import { broken, effects, safe } from "./fixtures/sweep-workflows.js";
import { FIXTURES } from "./helpers/child.js";
import { postgresTestUrl, withClient } from "./helpers/postgres.js";

const MODULE = join(FIXTURES, "sweep-workflows.ts");

const worlds: string[] = [];
afterEach(() => {
  for (const dir of worlds.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A directory for the fakes' world, emptied before each execution. */
function world() {
  const dir = mkdtempSync(join(tmpdir(), "cairn-sweep-world-"));
  worlds.push(dir);
  const reset = () => {
    for (const f of readdirSync(dir)) rmSync(join(dir, f));
  };
  return { env: { SWEEP_WORLD: dir }, reset };
}

describe('crashSweep({ crash: "process" })', () => {
  it("a safe workflow: killed at each boundary and resumed by a new process, it ends the same", async () => {
    const w = world();
    const res = await crashSweep({
      crash: "process",
      module: MODULE,
      workflows: [safe],
      workflow: safe,
      input: 3,
      sideEffects: effects,
      env: w.env,
      reset: w.reset,
      filter: (b) =>
        (b.key === "fetch" && b.point === "before-record") ||
        (b.key === "open-pr" && (b.point === "after-intent" || b.point === "before-record")),
    });
    expect(res.baseline).toEqual({
      status: "completed",
      output: 7,
      sideEffects: { "pull-request": 1 },
    });
    expect(res.boundaries.map((b) => [b.boundary.label, b.crashed])).toEqual([
      [`after step "fetch" returned, before its record`, true],
      [`between effect "open-pr"'s intent and its perform`, true],
      [`between effect "open-pr"'s perform and its completion record`, true],
    ]);
    expect(res.failures).toEqual([]);
    // Killed after perform: the killed child's record is in the ledger, and the new process's
    // reconcile found the pull request instead of opening another.
    expect(res.boundaries[2]?.sideEffects).toEqual({ "pull-request": 1 });
  });

  it("a broken workflow is reported as the in-process sweep reports it: each boundary, each side effect", async () => {
    const w = world();
    const common = {
      workflows: [broken],
      workflow: broken,
      input: undefined,
      sideEffects: effects,
      env: w.env,
      reset: w.reset,
      // Two boundaries keep it quick: a replay of the email alone, and of both.
      filter: (b: Boundary) => b.point === "after-intent" || b.point === "before-record",
    };
    // The in-process sweep needs the world's directory too: give it this process's env.
    process.env.SWEEP_WORLD = w.env.SWEEP_WORLD;
    const inProcess = await crashSweep(common).finally(() => {
      delete process.env.SWEEP_WORLD;
    });
    const killed = await crashSweep({ ...common, crash: "process", module: MODULE });
    expect(killed.baseline).toEqual(inProcess.baseline);
    expect(killed.boundaries.map((b) => b.boundary.label)).toEqual(
      inProcess.boundaries.map((b) => b.boundary.label),
    );
    expect(killed.boundaries.every((b) => b.crashed)).toBe(true);
    expect(killed.failures).toEqual(inProcess.failures);
    expect(killed.failures).toEqual([
      `crash between effect "open-pr"'s intent and its perform (run "crash-sweep"): ` +
        `side effect "email" happened 2 times (undisturbed: 1)`,
      `crash between effect "open-pr"'s perform and its completion record (run "crash-sweep"): ` +
        `side effect "email" happened 2 times (undisturbed: 1); ` +
        `side effect "pull-request" happened 2 times (undisturbed: 1)`,
    ]);
  });

  it("refuses what cannot reach a child process, saying what to do instead", async () => {
    const base = { workflows: [safe], workflow: safe, input: 1, crash: "process" as const };
    await expect(crashSweep(base)).rejects.toThrow(
      /crash: "process" \}\) needs module: the path of a module exporting your workflows/,
    );
    await expect(crashSweep({ ...base, module: "./no-such-module.ts" })).rejects.toThrow(
      /module "\.\/no-such-module\.ts" not found \(looked for .*no-such-module\.ts\)/,
    );
    await expect(
      crashSweep({ ...base, module: MODULE, sideEffects: createSideEffectCounter() }),
    ).rejects.toThrow(/make the counter with createSideEffectLedger\(\) in the module/);
    await expect(
      crashSweep({ ...base, module: MODULE, faults: [{ call: 1, throws: new Error("x") }] }),
    ).rejects.toThrow(/faults are in process only/);
    await expect(
      crashSweep({ ...base, module: MODULE, engineOptions: { log: () => {} } }),
    ).rejects.toThrow(/engineOptions\.log cannot be sent to a child process/);
  });

  it("a workflow the module does not export: the child's error names it and the module", async () => {
    const other = workflow({ name: "not-exported", version: "1" }, async () => 1);
    await expect(
      crashSweep({
        crash: "process",
        module: MODULE,
        workflows: [other],
        workflow: other,
        input: 1,
      }),
    ).rejects.toThrow(
      /the baseline child process of the undisturbed run \(run "[^"]+", workflow not-exported@1\) exited with code 1:\nmodule ".*sweep-workflows\.ts" does not export workflow "not-exported@1" \(it exports "sweep-broken@1", "sweep-safe@1"\)/,
    );
  });
});

const pgUrl = await postgresTestUrl();

describe.skipIf(!pgUrl)('crashSweep({ crash: "process", postgres })', () => {
  it("keeps each execution's run in a fresh schema, reports the same, and drops the schemas", async () => {
    const url = pgUrl as string;
    // The sweep schemas holding this sweep's run. Not a count of all sweep schemas: another
    // sweep on the same server (a test file beside this one, another checkout's test run)
    // has schemas of its own while this one runs, which a count took for ours left behind.
    const runId = `fresh-schemas-${randomBytes(4).toString("hex")}`;
    const schemasOfThisSweep = () =>
      withClient(url, async (c) => {
        const r = await c.query(
          "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'cairn_sweep_%'",
        );
        const ours: string[] = [];
        for (const { schema_name: schema } of r.rows as Array<{ schema_name: string }>) {
          // Another sweep's schema may be dropped (or not migrated yet) as it is looked at.
          const holds = await c.query(`SELECT 1 FROM "${schema}".runs WHERE id = $1`, [runId]).then(
            (q) => (q.rowCount ?? 0) > 0,
            () => false,
          );
          if (holds) ours.push(schema);
        }
        return ours;
      });
    // Another sweep's schema, there throughout this one.
    const other = `cairn_sweep_other_${randomBytes(4).toString("hex")}`;
    await withClient(url, (c) =>
      c.query(`CREATE SCHEMA "${other}"; CREATE TABLE "${other}".runs (id text)`),
    );
    onTestFinished(async () => {
      await withClient(url, (c) => c.query(`DROP SCHEMA "${other}" CASCADE`));
    });
    const w = world();
    const res = await crashSweep({
      crash: "process",
      module: MODULE,
      postgres: url,
      workflows: [broken],
      workflow: broken,
      input: undefined,
      runId,
      env: w.env,
      reset: w.reset,
      filter: (b) => b.point === "before-record",
    });
    expect(res.baseline).toEqual({
      status: "completed",
      output: "done",
      sideEffects: { email: 1, "pull-request": 1 },
    });
    expect(res.boundaries.map((b) => b.crashed)).toEqual([true]);
    expect(res.failures).toEqual([
      `crash between effect "open-pr"'s perform and its completion record (run "${runId}"): ` +
        `side effect "email" happened 2 times (undisturbed: 1); ` +
        `side effect "pull-request" happened 2 times (undisturbed: 1)`,
    ]);
    expect(await schemasOfThisSweep()).toEqual([]);
  });
});
