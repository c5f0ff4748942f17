// engine.getSteps("fix-24") and engine.listEvents("fix-24") for a run id with a typo (or a run
// retention deleted) answered [], as for a run with nothing recorded yet; readSteps,
// readEvents, readStream, listApprovals and the workspace reads said the run does not exist.
// Now every read verb of one run but getRun (undefined, as documented) does: one rule, as a
// describe of a missing workflow is NotFound elsewhere. The run is read only when the read
// came back empty: a run with records costs no more than before.

import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { type Engine, type Store, workflow } from "../src/index.js";
import { crashSweep, createTestEngine } from "../src/testing/index.js";
import { parent, workflows } from "./fixtures/child-waits.js";
import { FIXTURES } from "./helpers/child.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { around } from "./helpers/store-verbs.js";

const wf = workflow({ name: "unknown-run-reads", version: "1" }, async (ctx) => {
  const go = await ctx.waitForEvent<number>("go");
  return go.timedOut ? 0 : go.payload;
});

const notFound = (id: string) => ({
  name: "RunNotFoundError",
  code: "RUN_NOT_FOUND",
  message: `Run "${id}" does not exist`,
  runId: id,
});

/** Every read verb of one run, by name, for `id`. */
function reads(engine: Engine, id: string): Record<string, () => Promise<unknown>> {
  const hash = "a".repeat(64);
  return {
    getSteps: () => engine.getSteps(id),
    readSteps: () => engine.readSteps(id),
    listEvents: () => engine.listEvents(id),
    readEvents: () => engine.readEvents(id),
    listApprovals: () => engine.listApprovals(id),
    listWorkspaces: () => engine.listWorkspaces(id),
    readCheckpoint: () => engine.readCheckpoint(id, hash),
    readWorkspaceFile: () => engine.readWorkspaceFile(id, hash, "a.txt"),
    diffCheckpoints: () => engine.diffCheckpoints(id, hash, hash),
    readStream: () => engine.readStream(id),
  };
}

describe("reads of a run that does not exist", () => {
  it("getSteps and listEvents reject with RunNotFoundError; an existing run with nothing recorded reads empty", async () => {
    const t = await createTestEngine({ workflows: [wf] });
    try {
      await expect(t.engine.getSteps("fix-24")).rejects.toMatchObject(notFound("fix-24"));
      await expect(t.engine.listEvents("fix-24")).rejects.toMatchObject(notFound("fix-24"));
      // Created, nothing recorded yet: empty, not an error.
      const run = await t.engine.start(wf, undefined, { id: "fix-42" });
      expect(await t.engine.listEvents("fix-42")).toEqual([]);
      expect(await t.engine.getSteps("fix-42")).toEqual([]);
      await t.advanceUntilStatus(run, "waiting");
      expect((await t.engine.getSteps("fix-42")).map((s) => [s.key, s.status])).toEqual([
        ["go", "waiting"],
      ]);
      await t.engine.sendEvent("fix-42", "go", 7);
      expect((await t.settle(run)).output).toBe(7);
      expect((await t.engine.listEvents("fix-42")).map((e) => e.name)).toEqual(["go"]);
    } finally {
      await t.close();
    }
  });

  it("every read verb of one run refuses an unknown id alike; getRun and info() answer undefined", async () => {
    const t = await createTestEngine({ workflows: [wf] });
    try {
      expect(await t.engine.getRun("typo")).toBeUndefined();
      expect(await t.engine.handle("typo").info()).toBeUndefined();
      const answers: Record<string, unknown> = {};
      for (const [verb, read] of Object.entries(reads(t.engine, "typo"))) {
        answers[verb] = await read().then(
          (value) => ({ value }),
          (err: Error & { code?: string; runId?: string }) => [err.name, err.code, err.runId],
        );
      }
      const refused = ["RunNotFoundError", "RUN_NOT_FOUND", "typo"];
      expect(answers).toEqual(
        Object.fromEntries(Object.keys(reads(t.engine, "typo")).map((v) => [v, refused])),
      );
    } finally {
      await t.close();
    }
  });
});

describe("the crash sweep under the rule", () => {
  it('a process killed before it created the child run a script names recovers (listEvents of it: none sent, not "does not exist")', async () => {
    const sweep = await crashSweep({
      crash: "process",
      module: join(FIXTURES, "child-waits.ts"),
      workflows,
      workflow: parent,
      input: undefined,
      events: [{ runId: "crash-sweep/c", name: "go", payload: 41 }],
      filter: (b) => b.key === "first" && b.point === "after-record",
    });
    expect(sweep.baseline).toMatchObject({ status: "completed", output: 42 });
    expect(sweep.boundaries.map((b) => [b.boundary.label, b.crashed])).toEqual([
      ['after step "first"\'s record', true],
    ]);
    expect(sweep.failures).toEqual([]);
  }, 120_000);
});

describe.each(BACKENDS)("%s: the run is read only when a read came back empty", (backend) => {
  const harness = useHarness(backend);

  it("a retention-deleted run is not found; a run with records costs no run read", async () => {
    const h = harness();
    let runReads = 0;
    const counted = (): Store =>
      around(h.store(), {
        getRun: (call, ...args) => {
          runReads++;
          return call(...args);
        },
      });
    const engine = createEngine(h, counted());
    const run = await engine.start(wf, undefined, { id: "r1" });
    await advanceUntil(h.clock, waitFor(engine, "r1", "waiting"), 10);
    await engine.sendEvent("r1", "go", 3);
    expect(await advanceUntil(h.clock, run.result(), 10)).toBe(3);

    runReads = 0;
    expect((await engine.getSteps("r1")).map((s) => s.key)).toEqual(["go"]);
    expect((await engine.listEvents("r1")).map((e) => e.name)).toEqual(["go"]);
    expect(runReads).toBe(0);

    await h.clock.advance(60_000);
    expect((await engine.gc({ olderThan: "1s" })).runs).toBe(1);
    runReads = 0;
    await expect(engine.getSteps("r1")).rejects.toMatchObject(notFound("r1"));
    await expect(engine.listEvents("r1")).rejects.toMatchObject(notFound("r1"));
    expect(runReads).toBe(2);
  });
});

function createEngine(h: ReturnType<ReturnType<typeof useHarness>>, store: Store): Engine {
  return h.engine([wf], { store });
}

async function waitFor(engine: Engine, id: string, status: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if ((await engine.getRun(id))?.status === status) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`run "${id}" never became ${status}`);
}
