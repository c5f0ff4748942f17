// Something thrown out of an execution of a folded start (engine/folded-start.ts: a fresh-id
// run executed before its SQLite create commits) before it asked for that create. The
// store-error path (Execution.interruptedByStore) wrote with the placeholder epoch 0 of the
// claim to be: its hand-back (or pause) was refused, the run was created leased to this
// worker, executed by nothing, and the log said "it will resume". It now waits for the
// create, as a release does, and writes with the create's epoch.
//
// Publicly, such a throw came from encode: a run's output holding a getter that throws a
// proxy whose traps throw (instanceof included) escaped encode as what the trap threw,
// which the release took for a store error. A folded start stayed leased; a claimed run
// was handed back and claimed again, failing the same way, for ever. encode now refuses
// it (an EncodeError), and such a run fails with a SerializationError.

import { afterEach, describe, expect, it } from "vitest";
import { EncodeError, encode } from "../src/codec/codec.js";
import { Committer } from "../src/engine/committer.js";
import { Execution } from "../src/engine/execution.js";
import { claimToBe, FoldedStart } from "../src/engine/folded-start.js";
import { createEngine, SerializationError, sqliteStore, workflow } from "../src/index.js";
import type { Journal, NewRun } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { tempDbPath, tempDir, until } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A thrown value that throws null whatever is asked of it, instanceof included. */
function unreadable(): object {
  const t = () => {
    throw null;
  };
  return new Proxy(
    {},
    { getPrototypeOf: t, get: t, ownKeys: t, getOwnPropertyDescriptor: t, has: t },
  );
}

const oddOutput = workflow({ name: "odd-output", version: "1" }, async () => ({
  get report(): unknown {
    throw unreadable();
  },
}));

describe("an output whose getter throws an unreadable value", () => {
  it("encode refuses it as any value whose read throws", () => {
    const value = {
      get report(): unknown {
        throw unreadable();
      },
    };
    expect(() => encode(value)).toThrow(EncodeError);
    expect(() => encode(value)).toThrow(/reading \.report threw a value that cannot be read/);
  });

  for (const folded of [true, false]) {
    it(`fails its run (${folded ? "a folded start" : "a start under an id: claimed"})`, async () => {
      const db = tempDbPath();
      cleanups.push(db.cleanup);
      const logs: string[] = [];
      const e = createEngine({
        store: sqliteStore(db.path),
        workflows: [oddOutput],
        clock: createVirtualClock(),
        pollIntervalMs: 10,
        log: (m: string) => logs.push(m),
      });
      cleanups.push(() => e.close());
      const h = await e.start(oddOutput, undefined, folded ? {} : { id: "odd" });
      // Before the mend: "interrupted by a store error; it will resume", and the run stayed
      // running (folded), or was handed back and claimed again, over and over.
      await until(
        async () =>
          (await e.getRun(h.id))?.status === "failed" ||
          logs.some((l) => l.includes("interrupted by a store error")),
        "the run failed, or was taken for one a store error interrupted",
      );
      expect(logs.filter((l) => l.includes("interrupted by a store error"))).toEqual([]);
      await expect(h.result()).rejects.toThrow(SerializationError);
      await expect(h.result()).rejects.toThrow(/reading \.report threw/);
    });
  }
});

describe("an execution begun before its create, thrown out of before it asked for it", () => {
  const emptyJournal = (): Journal => ({ steps: [], attempts: [], intents: [], events: [] });

  /** An Execution begun as a folded start begins one (start-run.ts createExecuted), on a
   *  real SQLite store, for `run` and the workflow `wf`. */
  async function begin(
    run: NewRun & { claimBy: { workerId: string; leaseMs: number } },
    wf: object,
  ) {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const clock = createVirtualClock();
    const store = sqliteStore(db.path);
    await store.open({ clock });
    cleanups.push(() => store.close());
    const logs: string[] = [];
    const start = new FoldedStart(run, store.createReleasedRun!.bind(store), (made, folded) =>
      made?.created && !folded ? { run: made.run, recovered: false } : undefined,
    );
    const ex = new Execution(
      {
        store,
        committer: new Committer(store),
        clock,
        maxPayloadBytes: 1_000_000,
        maxStepsPerRun: 1_000,
        inProcessRetryMs: 0,
        abortGraceMs: 100,
        replayStallMs: 1_000,
        leaseMs: 30_000,
        startChild: async () => undefined,
        log: (m) => logs.push(m),
        lifecycle: () => {},
        workspaceRoot: dir.dir,
      },
      claimToBe(run, clock.now()),
      wf as never,
      emptyJournal(),
      start,
    );
    const made = await start.answer;
    await ex.finished;
    expect(made.created).toBe(true);
    return { store, ex, logs, createdEpoch: made.run.epoch };
  }

  const newRun = (input: string) => ({
    id: "r1",
    workflow: "thrown",
    version: "1",
    input,
    budgetLimit: {},
    parentId: null,
    claimBy: { workerId: "wrk_folded", leaseMs: 30_000 },
  });

  it("a throw that is no store's payload problem hands the run back to pending", async () => {
    // The workflow's function cannot even be read: thrown out of execute() at once.
    const wf = {
      name: "thrown",
      version: "1",
      options: {},
      get fn(): never {
        throw new Error("the workflow's code cannot be read");
      },
    };
    const { store, ex, logs, createdEpoch } = await begin(newRun("1"), wf);
    const after = await store.getRun("r1");
    expect(createdEpoch).toBeGreaterThan(0);
    // Before the mend: running, leased to wrk_folded (the hand-back, fenced by epoch 0, refused).
    expect(after?.status).toBe("pending");
    expect(after?.leaseOwner).toBeNull();
    expect(ex.letGo).toBe(true);
    expect(logs.some((l) => l.includes("it will resume"))).toBe(true);
  });

  it("an input no worker can decode pauses the run", async () => {
    const wf = workflow({ name: "thrown", version: "1" }, async () => "never");
    const { store, ex } = await begin(newRun("not a stored value"), wf);
    const after = await store.getRun("r1");
    // Before the mend: running, leased to wrk_folded (the pause, fenced by epoch 0, refused).
    expect(after?.status).toBe("paused");
    expect(after?.reason).toMatch(/its input cannot be decoded/);
    expect(ex.letGo).toBe(true);
  });
});
