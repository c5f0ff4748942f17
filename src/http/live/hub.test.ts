// The live hub on a fake feed: one poll per watched thing however many listen, a snapshot
// first, exact catch-up from a Last-Event-ID while the ring holds it (a snapshot
// otherwise), store problems as notices, and watchers that stop and go when nobody listens.

import { afterEach, describe, expect, it } from "vitest";
import { type Feed, type LiveEvent, LiveHub } from "./hub.js";

/** A feed over a counter the test moves; every change is one "tick" message. */
function counterFeed() {
  const state = { value: 0, reads: 0, failing: false };
  const feed: Feed<number> = {
    async read() {
      state.reads += 1;
      if (state.failing) throw new Error("store down");
      return state.value;
    },
    snapshot: (n) => ({ event: "snapshot", data: { value: n } }),
    changes: (prev, next) =>
      Array.from({ length: next - prev }, (_, i) => ({
        event: "tick",
        data: { value: prev + i + 1 },
      })),
  };
  return { state, feed };
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

const hubs: LiveHub[] = [];
afterEach(() => {
  for (const h of hubs.splice(0)) h.close();
});

function hub(o: Partial<ConstructorParameters<typeof LiveHub>[0]> = {}) {
  const logs: string[] = [];
  const h = new LiveHub({ pollMs: 2, log: (m) => logs.push(m), ...o });
  hubs.push(h);
  return { h, logs };
}

describe("LiveHub", () => {
  it("sends a snapshot, then each change once, to every listener of one shared poll", async () => {
    const { h } = hub();
    const { state, feed } = counterFeed();
    const a: LiveEvent[] = [];
    const b: LiveEvent[] = [];
    let made = 0;
    const make = () => {
      made += 1;
      return feed;
    };
    await h.subscribe("k", make, undefined, (e) => a.push(e));
    await h.subscribe("k", make, undefined, (e) => b.push(e));
    expect([h.size, made]).toEqual([1, 1]);
    expect(a).toEqual([
      { id: expect.stringMatching(/\.0$/), event: "snapshot", data: { value: 0 } },
    ]);
    state.value = 3;
    await until(() => a.length === 4 && b.length === 4, "three ticks each");
    expect(a.slice(1).map((e) => e.data)).toEqual([{ value: 1 }, { value: 2 }, { value: 3 }]);
    expect(b.slice(1)).toEqual(a.slice(1));
    const ids = a.map((e) => Number(e.id?.split(".")[1]));
    expect(ids).toEqual([0, 1, 2, 3]);
  });

  it("catches a returning listener up with exactly the events after its last id", async () => {
    const { h } = hub();
    const { state, feed } = counterFeed();
    const keeper: LiveEvent[] = [];
    await h.subscribe(
      "k",
      () => feed,
      undefined,
      (e) => keeper.push(e),
    );
    state.value = 2;
    await until(() => keeper.length === 3, "two ticks");
    const lastSeen = keeper[1]!.id!;
    state.value = 5;
    await until(() => keeper.length === 6, "three more");
    const back: LiveEvent[] = [];
    await h.subscribe(
      "k",
      () => feed,
      lastSeen,
      (e) => back.push(e),
    );
    expect(back).toEqual(keeper.slice(2));
    const current: LiveEvent[] = [];
    await h.subscribe(
      "k",
      () => feed,
      keeper[5]!.id,
      (e) => current.push(e),
    );
    expect(current).toEqual([]);
  });

  it("sends a snapshot when the ring no longer holds the id, or the id is another watcher's", async () => {
    const { h } = hub({ ringSize: 3 });
    const { state, feed } = counterFeed();
    const keeper: LiveEvent[] = [];
    await h.subscribe(
      "k",
      () => feed,
      undefined,
      (e) => keeper.push(e),
    );
    state.value = 6;
    await until(() => keeper.length === 7, "six ticks");
    for (const last of [
      keeper[1]!.id!,
      "someone-else.3",
      "garbage",
      `${keeper[0]!.id!.split(".")[0]}.99`,
    ]) {
      const got: LiveEvent[] = [];
      await h.subscribe(
        "k",
        () => feed,
        last,
        (e) => got.push(e),
      );
      expect(got).toEqual([{ id: keeper[6]!.id, event: "snapshot", data: { value: 6 } }]);
    }
    const inRing: LiveEvent[] = [];
    await h.subscribe(
      "k",
      () => feed,
      keeper[3]!.id,
      (e) => inRing.push(e),
    );
    expect(inRing).toEqual(keeper.slice(4));
  });

  it("tells listeners once when the store cannot be read, and once when it can again", async () => {
    const { h, logs } = hub();
    const { state, feed } = counterFeed();
    const got: LiveEvent[] = [];
    await h.subscribe(
      "k",
      () => feed,
      undefined,
      (e) => got.push(e),
    );
    state.failing = true;
    const reads = state.reads;
    await until(() => state.reads > reads + 5, "polls while failing");
    state.value = 1;
    state.failing = false;
    await until(() => got.some((e) => e.event === "tick"), "the tick after recovery");
    expect(got.map((e) => e.event)).toEqual(["snapshot", "problem", "problem", "tick"]);
    expect(got[1]).toEqual({
      event: "problem",
      data: { ok: false, message: "The store cannot be read; retrying" },
    });
    expect(got[2]).toEqual({ event: "problem", data: { ok: true } });
    expect(logs).toHaveLength(1);
  });

  it("stops polling when nobody listens and drops the watcher after lingering", async () => {
    const { h } = hub({ lingerMs: 30 });
    const { state, feed } = counterFeed();
    const off = await h.subscribe(
      "k",
      () => feed,
      undefined,
      () => {},
    );
    await until(() => state.reads > 3, "some polls");
    off();
    await until(() => h.size === 0, "the watcher is dropped");
    const reads = state.reads;
    await new Promise((r) => setTimeout(r, 20));
    expect(state.reads).toBe(reads);
  });

  it("runs the registered closers when it closes", async () => {
    const { h } = hub();
    let ended = 0;
    h.onClose(() => {
      ended += 1;
    });
    h.close();
    expect(ended).toBe(1);
    await expect(
      h.subscribe(
        "k",
        () => counterFeed().feed,
        undefined,
        () => {},
      ),
    ).rejects.toThrow(/closed/);
  });
});
