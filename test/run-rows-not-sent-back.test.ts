// Issue 13: PostgreSQL's creates and releases sent the whole run row back (RETURNING *), so a
// run's input crossed the wire three times per run: sent with the create, back with its
// answer, back again with the release's. Counted here: the bytes every pg connection of this
// process receives while one store verb runs, for runs with a 1 MB input. The answers stay
// whole (the created run's input, the released run's output), built from what the caller
// sent.

import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { NewRun, Store } from "../src/store/store.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";

const url = await postgresTestUrl();

/** Bytes received by every pg connection of this process (counted on its socket). */
let received = 0;
const counting = new WeakSet<object>();
const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const realQuery = proto.query;
proto.query = function (this: { connection?: { stream?: NodeJS.EventEmitter } }, ...args) {
  const stream = this.connection?.stream;
  if (stream && !counting.has(stream)) {
    counting.add(stream);
    stream.on("data", (b: Buffer) => {
      received += b.length;
    });
  }
  return realQuery.apply(this, args);
};

/** What `work` made this process receive from PostgreSQL, and its answer. */
async function receivedBy<T>(work: () => Promise<T>): Promise<{ bytes: number; value: T }> {
  const before = received;
  const value = await work();
  return { bytes: received - before, value };
}

const MB = 1_000_000;
/** Far below the input, far above a row without it (a few hundred bytes). */
const NO_PAYLOAD = 64 * 1024;
const bigInput = (tag: string) => JSON.stringify({ tag, pad: "x".repeat(MB) });

describe.skipIf(!url)("PostgreSQL: creates and releases do not send the input back", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  async function openStore(): Promise<Store> {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const store = postgresStore(base, { schema: t.schema });
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    // Opened and warmed up: each connection's first statements (prepares) are behind us.
    await store.getRun("none");
    return store;
  }

  const newRun = (id: string, over: Partial<NewRun> = {}): NewRun => ({
    id,
    workflow: "alpha",
    version: "1",
    input: bigInput(id),
    budgetLimit: {},
    ...over,
  });
  const claimBy = { workerId: "w1", leaseMs: 60_000 };

  it("a lone create, claimed or not, answers the whole run without receiving its input", async () => {
    const store = await openStore();
    for (const run of [newRun("run_a"), newRun("run_b", { claimBy })]) {
      const { bytes, value } = await receivedBy(() => store.createRun(run));
      expect(bytes).toBeLessThan(NO_PAYLOAD);
      expect(value.created).toBe(true);
      expect(value.run).toEqual(await store.getRun(run.id));
      expect(value.run.input).toBe(run.input);
    }
  });

  it("creates asked for in one turn (one INSERT) receive no input either", async () => {
    const store = await openStore();
    const runs = [newRun("run_1"), newRun("run_2", { claimBy }), newRun("run_3")];
    const { bytes, value } = await receivedBy(() =>
      Promise.all(runs.map((r) => store.createRun(r))),
    );
    expect(bytes).toBeLessThan(NO_PAYLOAD);
    for (const [i, made] of value.entries()) {
      expect(made.created).toBe(true);
      expect(made.run).toEqual(await store.getRun(runs[i]!.id));
    }
  });

  it("a create that finds its id taken still answers the run found, input and all", async () => {
    const store = await openStore();
    await store.createRun(newRun("run_taken"));
    const again = await store.createRun(newRun("run_taken", { input: '"other"' }));
    expect(again.created).toBe(false);
    expect(again.run.input).toBe(bigInput("run_taken"));
  });

  it("releases (a lone completion, a group's, one with events) receive neither payload", async () => {
    const store = await openStore();
    const output = JSON.stringify("y".repeat(MB));
    const { run: done } = await store.createRun(newRun("run_done", { claimBy }));
    const lone = await receivedBy(() =>
      store.releaseRun({
        runId: done.id,
        epoch: done.epoch,
        status: "completed",
        output,
        readyAt: null,
      }),
    );
    expect(lone.bytes).toBeLessThan(NO_PAYLOAD);
    expect(lone.value.ok && lone.value.run.status).toBe("completed");
    const { input: _, ...stored } = (await store.getRun(done.id))!;
    expect(lone.value.ok && lone.value.run).toEqual(stored);

    // A release to waiting goes to release_runs.
    const { run: parent } = await store.createRun(newRun("run_parent", { claimBy }));
    const waiting = await receivedBy(() =>
      store.releaseRun({
        runId: parent.id,
        epoch: parent.epoch,
        status: "waiting",
        readyAt: null,
        waitingFor: ["cairn.child:run_child"],
      }),
    );
    expect(waiting.bytes).toBeLessThan(NO_PAYLOAD);
    expect(waiting.value.ok && waiting.value.run.status).toBe("waiting");

    // A child's completion with its result for the parent: both rows locked, neither read.
    const { run: child } = await store.createRun(
      newRun("run_child", { claimBy, parentId: parent.id }),
    );
    const withEvents = await receivedBy(() =>
      store.releaseRun({
        runId: child.id,
        epoch: child.epoch,
        status: "completed",
        output: '"small"',
        readyAt: null,
        events: [{ runId: parent.id, name: "cairn.child:run_child", payload: '"small"' }],
      }),
    );
    expect(withEvents.bytes).toBeLessThan(NO_PAYLOAD);
    expect(withEvents.value.ok && withEvents.value.run.output).toBe('"small"');
    expect((await store.getRun(parent.id))?.readyAt).not.toBeNull();

    // An event sent to a run locks its row without reading its input.
    const sent = await receivedBy(() =>
      store.sendEvent({ runId: parent.id, name: "other", payload: "1" }),
    );
    expect(sent.bytes).toBeLessThan(NO_PAYLOAD);
    expect(sent.value.ok).toBe(true);
  });
});
