// `cairn result --wait` and `cairn start --wait` as a person uses them: a run no live worker
// serves was waited for in silence (start --wait warned, result --wait did not), and Ctrl+C
// killed the process by the signal with nothing said (worker and ui say what they do). Now
// result --wait warns as start does and waits all the same, and a stop signal ends the
// wait with one line saying the run goes on, exit 130. `cairn start` without --wait also
// says how to wait for the output.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, sqliteStore } from "../src/index.js";
import { cairn, startCairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

describe("cairn result/start --wait with no worker, and Ctrl+C (SQLite)", () => {
  const dir = tempDir("cairn-wait-");
  const path = join(dir.dir, "cairn.db");
  const store = ["--store", `sqlite:${path}`];
  // No worker at all: the runs stay pending.
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(path), worker: false });
    await engine.listRuns();
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("start without --wait says how to follow the run and how to wait for its output", async () => {
    const res = await cairn(["start", "triage@1", "--id", "r-follow", ...store]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain(
      "Follow it with: cairn show r-follow; wait for its output: cairn result r-follow --wait",
    );
  });

  it("result --wait warns that no live worker serves the run, keeps waiting, and Ctrl+C says the run goes on (exit 130)", async () => {
    const started = await cairn(["start", "triage@1", "--id", "r-1", ...store]);
    expect(started.code, started.stderr).toBe(0);
    const child = startCairn(["result", "r-1", "--wait", ...store]);
    const warning =
      'cairn: warning: no worker is running; run "r-1" stays pending until a worker serving triage@1 runs; waiting all the same (Ctrl+C stops waiting)\n';
    await until(() => child.output.stderr.includes(warning), "the warning");
    // Still waiting: nothing ended it.
    expect(child.child.exitCode).toBe(null);
    child.child.kill("SIGINT");
    const res = await child.done;
    expect(res.signal).toBe(null);
    expect(res.code).toBe(130);
    expect(res.stdout).toBe("");
    expect(res.stderr).toBe(
      `${warning}cairn: SIGINT: stopped waiting; run "r-1" goes on (look again: cairn result r-1 --wait)\n`,
    );
    expect((await engine.getRun("r-1"))?.status).toBe("pending");
  });

  it("start --wait: SIGINT during the wait says the run goes on (exit 130)", async () => {
    const child = startCairn(["start", "triage@1", "--id", "r-2", "--wait", ...store]);
    await until(() => child.output.stderr.includes("Waiting for it to finish"), "the wait");
    child.child.kill("SIGINT");
    const res = await child.done;
    expect(res.signal).toBe(null);
    expect(res.code).toBe(130);
    expect(res.stderr).toContain(
      'cairn: SIGINT: stopped waiting; run "r-2" goes on (look again: cairn result r-2 --wait)\n',
    );
    expect((await engine.getRun("r-2"))?.status).toBe("pending");
  });

  it("start --wait of a run that exists already warns as result --wait does; SIGTERM ends the wait too", async () => {
    const child = startCairn(["start", "triage@1", "--id", "r-1", "--wait", ...store]);
    await until(() => child.output.stderr.includes("Waiting for it to finish"), "the wait");
    expect(child.output.stderr).toContain(
      'no worker is running; run "r-1" stays pending until a worker serving triage@1 runs; waiting all the same',
    );
    child.child.kill("SIGTERM");
    const res = await child.done;
    expect(res.code).toBe(130);
    expect(res.stderr).toContain('cairn: SIGTERM: stopped waiting; run "r-1" goes on');
  });

  it("result --wait --timeout warns too before giving up (exit 3)", async () => {
    const child = startCairn(["result", "r-1", "--wait", "--timeout", "1ms", ...store]);
    const res = await child.done;
    expect(res.code).toBe(3);
    expect(res.stderr).toContain('run "r-1" stays pending until a worker serving triage@1 runs');
  });
});
