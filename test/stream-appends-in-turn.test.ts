// A run's streaming model calls in parallel (streamText with parallel tool calls, several
// agents of one run) and the run's own writes. On PostgreSQL the store's append holds the
// run's row FOR SHARE (so a finish waits for an append in flight); the writers of parallel
// calls each had an append in flight, their transactions overlapped (queued on the stream's
// heads row while holding the run's row), and the row was never free: a lease renewal, a
// step's record or the run's release (each an update of that row) waited as long as the
// calls streamed. With four calls streaming, a renewal ran into the 30 s statement_timeout
// and failed. Now a process has at most one append of a run in flight, and batches of the
// run's other calls that come meanwhile go out together in the next.

import { afterEach, describe, expect, it } from "vitest";
import { RunStreamWriter } from "../src/ai/run-stream.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { Store } from "../src/store/store.js";
import { BACKENDS, pgUrl, useHarness } from "./helpers/engines.js";
import { claimedRun } from "./helpers/plain-records.js";
import { testSchema } from "./helpers/postgres.js";

/** `inner`, counting its appendStream calls: those settled, and the most in flight at once. */
function countedAppends(inner: Store) {
  const n = { inFlight: 0, most: 0, settled: 0, chunks: 0 };
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      if (prop !== "appendStream") return value.bind(target);
      return async (p: Parameters<Store["appendStream"]>[0]) => {
        n.inFlight++;
        n.most = Math.max(n.most, n.inFlight);
        try {
          return await target.appendStream(p);
        } finally {
          n.inFlight--;
          n.settled++;
          n.chunks += p.chunks.length;
        }
      };
    },
  });
  return { store, n };
}

/** `calls` writers of one run, each pushing a text delta every millisecond or so until
 *  `stop()`; `closed` settles once every writer has stored what it was pushed. */
function streaming(store: Store, runId: string, calls: number) {
  let stopped = false;
  const pushed = new Array<number>(calls).fill(0);
  const writers = Array.from(
    { length: calls },
    (_, i) =>
      new RunStreamWriter(store, runId, {
        call: `c${i}`,
        name: "model:m",
        generation: 0,
        attempt: 1,
      }),
  );
  const loops = writers.map(async (w, i) => {
    w.push({ type: "text-start", id: "t" });
    while (!stopped) {
      w.push({ type: "text-delta", id: "t", delta: "x" });
      pushed[i]!++;
      await new Promise((r) => setTimeout(r, 1));
    }
    w.push({ type: "text-end", id: "t" });
    await w.close();
  });
  return {
    stop: () => {
      stopped = true;
    },
    stopped: () => stopped,
    closed: Promise.all(loops),
    pushed,
  };
}

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe.runIf(pgUrl)("parallel streaming calls of one run and its row (postgres)", () => {
  it("a lease renewal waits for one append at most, not for as long as four calls stream", async () => {
    const t = testSchema(pgUrl!);
    cleanups.push(t.drop);
    const appender = postgresStore(pgUrl!, { schema: t.schema });
    await appender.open({ clock: realClock });
    cleanups.push(() => appender.close());
    const renewer = postgresStore(pgUrl!, { schema: t.schema, poolSize: 2 });
    await renewer.open({ clock: realClock });
    cleanups.push(() => renewer.close());
    const { run } = await appender.createRun(claimedRun("streams-four"));
    const counted = countedAppends(appender);
    const s = streaming(counted.store, run.id, 4);
    // Bounded either way: the calls stop once 400 appends have settled, and the renewal
    // (which waited for them all, without the mend) then goes through.
    const cap = (async () => {
      while (counted.n.settled < 400 && !s.stopped()) await new Promise((r) => setTimeout(r, 1));
      s.stop();
    })();
    while (counted.n.settled < 20) await new Promise((r) => setTimeout(r, 1));

    const before = counted.n.settled;
    const renewed = await renewer.renewLeases({
      workerId: "w",
      runs: [{ runId: run.id, epoch: run.epoch }],
      leaseMs: 600_000,
    });
    const during = counted.n.settled - before;
    s.stop();
    await s.closed;
    await cap;

    expect(renewed.lost).toEqual([]);
    // The renewal waited for the append in flight, and perhaps the next (before: all the
    // appends until the cap stopped the calls, hundreds).
    expect(during).toBeLessThanOrEqual(10);
    // One append of the run in flight at a time (four, one per call, before).
    expect(counted.n.most).toBe(1);
    // Every part pushed is stored, each call's in its order.
    const stored = await appender.readStream({ runId: run.id, from: 0, limit: 100_000 });
    expect(stored.map((c) => c.offset)).toEqual(stored.map((_, i) => i));
    const text = new Array<string>(4).fill("");
    for (const c of stored) {
      const chunk = JSON.parse(c.data) as { call: string; part: { type: string; delta?: string } };
      const i = Number(chunk.call.slice(1));
      if (chunk.part.type === "text-delta") text[i] = `${text[i]}${chunk.part.delta}`;
    }
    expect(text.map((x) => x.length)).toEqual(s.pushed);
  });
});

describe.each(BACKENDS)("writers of one run's stream share its appends (%s)", (backend) => {
  const harness = useHarness(backend);

  it("batches of several calls go out in one append; each writer still learns when the run has finished", async () => {
    const h = harness();
    const inner = h.store();
    await inner.open({ clock: h.clock });
    h.onCleanup?.(() => inner.close());
    const { run } = await inner.createRun(claimedRun("streams-shared"));
    // The run's first append is held at the store until `open()`.
    let open!: () => void;
    const gate = new Promise<void>((r) => {
      open = r;
    });
    let calls = 0;
    const counted = countedAppends(
      new Proxy(inner, {
        get(target, prop, receiver) {
          const value = Reflect.get(target, prop, receiver);
          if (typeof value !== "function") return value;
          if (prop !== "appendStream") return value.bind(target);
          return async (p: Parameters<Store["appendStream"]>[0]) => {
            if (calls++ === 0) await gate;
            return target.appendStream(p);
          };
        },
      }),
    );
    const header = (call: string) => ({ call, name: "model:m", generation: 0, attempt: 1 });
    const ws = ["a", "b", "c"].map((c) => new RunStreamWriter(counted.store, run.id, header(c)));
    ws[0]!.push({ type: "text-start", id: "t" });
    await new Promise((r) => setImmediate(r)); // its flush has begun: its append is held
    ws[1]!.push({ type: "text-start", id: "t" });
    ws[2]!.push({ type: "text-start", id: "t" });
    await new Promise((r) => setImmediate(r)); // their flushes have begun too
    await new Promise((r) => setImmediate(r));
    // Before: three appends in flight, one per call.
    expect(counted.n.inFlight).toBe(1);
    open();
    await Promise.all(ws.map((w) => w.close()));
    // b's and c's batches went out together once a's append was answered.
    expect(counted.n.settled).toBe(2);
    expect(counted.n.chunks).toBe(3);
    const stored = await inner.readStream({ runId: run.id, from: 0 });
    expect(stored.map((c) => (JSON.parse(c.data) as { call: string }).call).sort()).toEqual([
      "a",
      "b",
      "c",
    ]);

    const released = await inner.releaseRun({
      runId: run.id,
      epoch: run.epoch,
      status: "completed",
      output: "1",
      readyAt: null,
    });
    expect(released.ok).toBe(true);
    for (const w of ws) w.push({ type: "text-delta", id: "t", delta: "late" });
    const outcomes = await Promise.allSettled(ws.map((w) => w.close()));
    expect(outcomes.map((o) => (o.status === "rejected" ? String(o.reason) : "ok"))).toEqual(
      ["a", "b", "c"].map(
        (c) =>
          `Error: run "${run.id}" had finished when these parts of call "${c}" reached the store: dropped, not appended after its end`,
      ),
    );
    expect((await inner.readStream({ runId: run.id, from: 0 })).length).toBe(3);
  });
});

// A store whose appendStream throws at once (a custom Store's method that is not async):
// the throw escaped the run's append queue, its batch never settled and the run's queue
// stayed taken, so every later append of the run waited for ever.
describe("a store whose appendStream throws at once", () => {
  it("fails that writer, and the run's next append goes through", async () => {
    let throwNext = true;
    const appended: string[][] = [];
    const store = {
      appendStream(p: Parameters<Store["appendStream"]>[0]) {
        if (throwNext) {
          throwNext = false;
          throw new Error("refused at once");
        }
        appended.push(p.chunks);
        return Promise.resolve({ ok: true as const, offset: 0 });
      },
    } as unknown as Store;
    const header = (call: string) => ({ call, name: "model:m", generation: 0, attempt: 1 });
    const first = new RunStreamWriter(store, "sync-throw", header("a"));
    first.push({ type: "text-delta", id: "t", delta: "x" });
    await expect(first.close()).rejects.toThrow("refused at once");
    const second = new RunStreamWriter(store, "sync-throw", header("b"));
    second.push({ type: "text-delta", id: "t", delta: "y" });
    const settled = await Promise.race([
      second.close().then(() => "stored"),
      new Promise((r) => setTimeout(() => r("stuck"), 10_000)),
    ]);
    expect(settled).toBe("stored");
    expect(appended).toHaveLength(1);
  });
});
