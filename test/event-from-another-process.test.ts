// An event sent from ANOTHER OS PROCESS reaches a wait that is blocked in the worker's
// process while a parallel step keeps the run executing, on both backends. Regression:
// on SQLite (no cross-process hint) such an event was missed until the run stopped
// executing, so the wait reported `timedOut: true` although the event arrived in time.
// The worker (an engine in this process, on the real clock) runs
//   Promise.all([ctx.waitForEvent("go", { timeout: "10m" }), ctx.step("busy", ...)])
// where "busy" runs until the test lets it finish. The event comes from (1) `cairn send`
// and (2) a child node process with a client engine of its own (selectStore +
// createEngine). The wait must receive it WHILE "busy" still runs; then the run completes
// with the payload, and the event is consumed exactly once.

import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  createEngine,
  type Engine,
  type EventView,
  realClock,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { spawnFixture } from "./helpers/child.js";
import { cairn } from "./helpers/cli.js";
import { BACKENDS, type Backend, pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";

type Go = { ok: boolean; note: string; n: number };
type Answer = { timedOut: true } | { timedOut: false; payload: Go };

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A fresh store of `backend`, as the worker opens it and as another process names it. */
function freshStore(backend: Backend): {
  open: () => Store;
  /** `cairn` flags naming the store. */
  cliArgs: string[];
  /** The child fixture's <store> <schema|-> arguments. */
  childArgs: [string, string];
} {
  if (backend === "sqlite") {
    const { dir, cleanup } = tempDir("cairn-xproc-event-");
    cleanups.push(cleanup);
    const path = join(dir, "cairn.db");
    return {
      open: () => sqliteStore(path),
      cliArgs: ["--store", `sqlite:${path}`],
      childArgs: [`sqlite:${path}`, "-"],
    };
  }
  const url = pgUrl;
  if (!url) throw new Error("postgres backend without a database");
  const { schema, drop } = testSchema(url, "cairn_xproc");
  cleanups.push(drop);
  return {
    open: () => postgresStore(url, { schema }),
    cliArgs: ["--store", url, "--schema", schema],
    childArgs: [url, schema],
  };
}

/** The workflow under test, with the in-process observations the test makes of it. */
function scenario() {
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const seen = {
    busyStarted: 0,
    busyFinished: 0,
    /** What the wait resolved with, each time it resolved in this process. */
    answers: [] as Answer[],
    /** busyFinished at the moment the wait resolved (0: "busy" was still running). */
    busyFinishedWhenAnswered: [] as number[],
  };
  const wf = workflow({ name: "xproc-event", version: "1" }, async (ctx) => {
    const [answer, busy] = await Promise.all([
      ctx.waitForEvent<Go>("go", { timeout: "10m" }).then((a) => {
        seen.answers.push(a as Answer);
        seen.busyFinishedWhenAnswered.push(seen.busyFinished);
        return a;
      }),
      ctx.step("busy", async () => {
        seen.busyStarted++;
        await gate;
        seen.busyFinished++;
        return "busy done";
      }),
    ]);
    // The one event was consumed by the wait above: a second wait for the same name must
    // not get it again.
    const again = await ctx.waitForEvent<Go>("go", { timeout: "1s" });
    return ctx.step("finish", () => ({ answer, busy, again }));
  });
  return { wf, release, seen };
}

describe.each(BACKENDS)("an event from another process on %s", (backend) => {
  async function startWorker() {
    const store = freshStore(backend);
    const { wf, release, seen } = scenario();
    const engine: Engine = createEngine({ store: store.open(), workflows: [wf], clock: realClock });
    // Never left hanging: a failed assertion still lets "busy" end before the engine closes
    // (else close() would wait out its grace for the gated step).
    cleanups.push(async () => {
      release();
      await engine.close();
    });
    const run = await engine.start(wf, undefined, { id: `xproc-${backend}` });
    // Both branches in flight: the wait is recorded (blocked) and "busy" runs.
    await until(
      async () =>
        seen.busyStarted === 1 &&
        (await engine.getSteps(run.id)).some((s) => s.key === "go" && s.kind === "wait"),
      "the wait is blocked and the busy step runs",
    );
    expect((await engine.getRun(run.id))?.status).toBe("running");
    return { store, engine, run, release, seen };
  }

  /** The wait got `payload` while "busy" still ran; then the run completes with it and the
   *  event is consumed exactly once. */
  async function expectDelivered(
    ctx: Awaited<ReturnType<typeof startWorker>>,
    payload: Go,
  ): Promise<void> {
    const { engine, run, release, seen } = ctx;
    await until(
      () => seen.answers.length > 0,
      "the wait blocked in the worker's process receives the event from the other process",
    );
    expect(seen.answers).toEqual([{ timedOut: false, payload }]);
    expect(seen.busyFinishedWhenAnswered).toEqual([0]); // the run was still executing
    expect(seen.busyFinished).toBe(0);
    expect((await engine.getRun(run.id))?.status).toBe("running");

    release();
    const result = await run.result();
    expect(result).toEqual({
      answer: { timedOut: false, payload },
      busy: "busy done",
      again: { timedOut: true },
    });
    expect(seen.busyStarted).toBe(1);
    expect(seen.busyFinished).toBe(1);

    const view = await engine.getRun(run.id);
    expect(view?.status).toBe("completed");
    expect(view?.output).toEqual(result);
    const events: EventView[] = await engine.listEvents(run.id);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ name: "go", payload, consumedBy: "go" });
    const waits = (await engine.getSteps(run.id)).filter((s) => s.kind === "wait");
    expect(waits.map((s) => [s.key, s.status, s.result])).toEqual([
      ["go", "completed", { timedOut: false, payload }],
      [expect.not.stringMatching(/^go$/), "completed", { timedOut: true }],
    ]);
  }

  it("cairn send from the CLI reaches the wait while a parallel step keeps the run executing", async () => {
    const ctx = await startWorker();
    const payload: Go = { ok: true, note: "from the CLI ✓", n: 1 };
    const sent = await cairn([
      "send",
      ctx.run.id,
      "go",
      JSON.stringify(payload),
      ...ctx.store.cliArgs,
    ]);
    expect(sent.code, sent.stderr).toBe(0);
    expect(sent.stdout.trim()).toBe(`Sent event "go" to run "${ctx.run.id}".`);
    expect(sent.stderr).toBe("");
    await expectDelivered(ctx, payload);
  });

  it("engine.sendEvent in a child process with its own store reaches the wait while a parallel step keeps the run executing", async () => {
    const ctx = await startWorker();
    const payload: Go = { ok: false, note: "from a child process", n: 2 };
    const child = await spawnFixture("send-event-child.ts", [
      ...ctx.store.childArgs,
      ctx.run.id,
      "go",
      JSON.stringify(payload),
    ]).done;
    expect(child.code, child.stderr).toBe(0);
    const out = JSON.parse(child.stdout) as { pid: number; duplicate: boolean; event: EventView };
    expect(out.pid).not.toBe(process.pid);
    expect(out.duplicate).toBe(false);
    expect(out.event).toMatchObject({ name: "go", payload });
    await expectDelivered(ctx, payload);
  });
});
