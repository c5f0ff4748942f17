// Runs' model stream tails on a fake engine: one look per run however many follow it, each
// follower served from its own offset (one that joins below a look under way gets its
// chunks from the next look), the end once the run has finished and every chunk is out,
// store problems said once, and no polling once nobody follows.

import { afterEach, describe, expect, it } from "vitest";
import { type Engine, RunNotFoundError, type RunStatus, type StreamChunk } from "../../index.js";
import { type StreamFollower, StreamTails } from "./stream-tail.js";

const RUN = "run_tail";
/** Long enough that only a newcomer wakes a tail: every look in these tests is counted. */
const NEVER_MS = 3_600_000;

/** An engine whose stream and status the test sets; reads can be held open. */
function fakeEngine() {
  const state = {
    chunks: [] as StreamChunk[],
    status: "running" as RunStatus | "deleted",
    failing: false,
    reads: [] as number[],
    statusReads: 0,
    hold: undefined as Promise<void> | undefined,
  };
  const engine = {
    async readStream(id: string, o: { from?: number; limit?: number } = {}) {
      const from = o.from ?? 0;
      state.reads.push(from);
      await state.hold;
      if (state.failing) throw new Error("store down");
      if (state.status === "deleted") throw new RunNotFoundError(`Run "${id}" does not exist`);
      return state.chunks.filter((c) => c.offset >= from).slice(0, o.limit ?? 500);
    },
    async getRun() {
      state.statusReads += 1;
      if (state.status === "deleted") return undefined;
      return { status: state.status };
    },
  } as unknown as Engine;
  const append = (n: number) => {
    for (let i = 0; i < n; i++) {
      state.chunks.push({ offset: state.chunks.length, data: "{}", createdAt: 0 });
    }
  };
  return { state, engine, append };
}

function follower(next = 0) {
  const got: number[] = [];
  const events: string[] = [];
  const f: StreamFollower = {
    next,
    chunk: (c) => got.push(c.offset),
    end: (status, n) => events.push(`end ${status} ${n}`),
    problem: (ok) => events.push(`problem ${ok}`),
  };
  return { f, got, events };
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

const made: StreamTails[] = [];
afterEach(() => {
  for (const t of made.splice(0)) t.close();
});

function tails(engine: Engine, pollMs = NEVER_MS) {
  const logs: string[] = [];
  const t = new StreamTails({ engine, pollMs, log: (m) => logs.push(m) });
  made.push(t);
  return { t, logs };
}

describe("StreamTails", () => {
  it("one look serves every follower; the stream ends once the run has finished", async () => {
    const { state, engine, append } = fakeEngine();
    const { t } = tails(engine);
    append(3);
    const [a, b, c] = [follower(), follower(), follower()];
    for (const x of [a, b, c]) t.follow(RUN, x.f);
    await until(() => [a, b, c].every((x) => x.got.length === 3), "three chunks each");
    expect([t.size, state.reads, state.statusReads]).toEqual([1, [0], 1]);

    // A newcomer wakes the tail: one look for all four, which finds the run finished.
    append(1);
    state.status = "completed";
    const d = follower(3);
    t.follow(RUN, d.f);
    await until(() => t.size === 0, "the tail is dropped");
    for (const x of [a, b, c]) {
      expect(x.got).toEqual([0, 1, 2, 3]);
      expect(x.events).toEqual(["end completed 4"]);
    }
    expect(d.got).toEqual([3]);
    // The look at 3, then the drain after the finished status.
    expect([state.reads, state.statusReads]).toEqual([[0, 3, 4], 2]);
  });

  it("a follower that joins below the offset being looked at gets its chunks from the next look", async () => {
    const { state, engine, append } = fakeEngine();
    const { t } = tails(engine);
    append(7);
    let release!: () => void;
    state.hold = new Promise((r) => {
      release = r;
    });
    const ahead = follower(5);
    t.follow(RUN, ahead.f);
    await until(() => state.reads.length === 1, "the first look");
    const behind = follower(2);
    t.follow(RUN, behind.f);
    release();
    await until(() => behind.got.length === 5, "the chunks from 2");
    expect(ahead.got).toEqual([5, 6]);
    expect(behind.got).toEqual([2, 3, 4, 5, 6]);
    expect(state.reads).toEqual([5, 2]);
  });

  it("says once that the store cannot be read, and when it can again; a deleted run ends", async () => {
    const { state, engine, append } = fakeEngine();
    const { t, logs } = tails(engine, 2);
    state.failing = true;
    const a = follower();
    t.follow(RUN, a.f);
    await until(() => state.reads.length >= 3, "a few failed looks");
    const late = follower();
    t.follow(RUN, late.f);
    expect(a.events).toEqual(["problem false"]);
    expect(late.events).toEqual(["problem false"]);
    expect(logs).toEqual(["model stream of a run: reading the store failed: store down"]);
    append(2);
    state.failing = false;
    await until(() => a.got.length === 2 && late.got.length === 2, "the chunks");
    expect(a.events).toEqual(["problem false", "problem true"]);
    state.status = "deleted";
    await until(() => t.size === 0, "the tail is dropped");
    expect(a.events.at(-1)).toBe("end deleted 2");
    expect(late.events.at(-1)).toBe("end deleted 2");
  });

  it("stops looking when the last follower leaves", async () => {
    const { state, engine } = fakeEngine();
    const { t } = tails(engine, 2);
    const a = follower();
    const leave = t.follow(RUN, a.f);
    await until(() => state.reads.length >= 2, "polling");
    leave?.();
    // Dropped only once its loop has ended: nothing polls for this run any more.
    await until(() => t.size === 0, "the tail is dropped");
    t.close();
    expect(t.follow(RUN, follower().f)).toBeUndefined();
  });
});
