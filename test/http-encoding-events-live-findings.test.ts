// Found by an adversarial review of steering runs through the HTTP API (cancel, resume,
// fork, events, approvals) while a worker executes them, and of every route's input: each
// test is a bug it found, and failed before its mend.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { type Feed, type LiveEvent, LiveHub } from "../src/http/live/hub.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { call } from "./helpers/http.js";
import { tempDir, until } from "./helpers/sqlite.js";

type ErrorJson = { error: { code: string; message: string } };

describe("percent-encoding that is not UTF-8", () => {
  const dir = tempDir("cairn-http-findings-");
  const waits = workflow({ name: "pct", version: "1" }, async (ctx) => {
    await ctx.waitForEvent("go");
  });
  let engine: Engine;
  let app: ReturnType<typeof createHttpApp>;
  const logs: string[] = [];
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [waits],
      pollIntervalMs: 10,
    });
    app = createHttpApp({ engine, log: (m) => logs.push(m) });
    await engine.start(waits, undefined, { id: "p1" });
    await until(async () => (await engine.getRun("p1"))?.status === "waiting", "p1 waits");
  });
  afterAll(async () => {
    app.close();
    await engine.close();
    dir.cleanup();
  });

  it("an event name whose escapes are not UTF-8 (a cut emoji, Latin-1, a lone surrogate) is a 400 naming the field; no event is stored under the escapes' literal text", async () => {
    for (const name of ["%F0%9F", "caf%E9", "%ED%A0%80", "ok%F0%9F%98%80%FF"]) {
      const res = await call<ErrorJson>(app.fetch, "POST", `/api/runs/p1/events/${name}`, {
        body: { n: 1 },
      });
      expect([name, res.status, res.body.error?.code]).toEqual([name, 400, "VALIDATION"]);
      expect(res.body.error.message).toMatch(/path parameter "name".*not UTF-8/);
    }
    expect(await engine.listEvents("p1")).toEqual([]);
    // Escapes that decode are read as sent, a literal "%" that escapes nothing too.
    const emoji = await call(app.fetch, "POST", "/api/runs/p1/events/%F0%9F%98%80", { body: 1 });
    const pct = await call(app.fetch, "POST", "/api/runs/p1/events/100%25", { body: 1 });
    expect([emoji.status, pct.status]).toEqual([201, 201]);
    expect((await engine.listEvents("p1")).map((e) => e.name)).toEqual(["😀", "100%"]);
    expect(logs).toEqual([]);
  });

  it("a run id or a query value whose escapes are not UTF-8 is a 400, not a search for its literal text", async () => {
    const run = await call<ErrorJson>(app.fetch, "GET", "/api/runs/p%FF1");
    expect([run.status, run.body.error?.code]).toEqual([400, "VALIDATION"]);
    expect(run.body.error.message).toMatch(/path parameter "id"/);
    const list = await call<ErrorJson>(app.fetch, "GET", "/api/runs?q=p%F0%9F");
    expect([list.status, list.body.error?.code]).toEqual([400, "VALIDATION"]);
    expect(list.body.error.message).toMatch(/query parameter "q"/);
    const ok = await call<{ runs: unknown[] }>(app.fetch, "GET", "/api/runs?q=p%31");
    expect([ok.status, ok.body.runs.length]).toEqual([200, 1]);
  });
});

describe("the live stream of a run deleted between the check that it exists and its first read", () => {
  const dir = tempDir("cairn-http-findings-gone-");
  const quick = workflow({ name: "gone-race", version: "1" }, async (ctx) => {
    await ctx.step("only", () => 1);
  });
  const store = sqliteStore(join(dir.dir, "cairn.db"));
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({ store, workflows: [quick], pollIntervalMs: 10 });
    await engine.start(quick, undefined, { id: "gone" });
    await until(async () => (await engine.getRun("gone"))?.status === "completed", "completes");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("ends after the snapshot that says the run is gone, instead of polling it for as long as the client stays", async () => {
    const seen = await engine.getRun("gone");
    expect(await store.deleteRun("gone")).toMatchObject({ deleted: true });
    // The route's existence check reads the run as it was a moment before retention
    // deleted it; every later read finds it gone.
    let stale = true;
    const racing = new Proxy(engine, {
      get(target, key) {
        const value = Reflect.get(target, key, target);
        if (key !== "getRun") return typeof value === "function" ? value.bind(target) : value;
        return async (id: string) => {
          if (stale && id === "gone") {
            stale = false;
            return seen;
          }
          return target.getRun(id);
        };
      },
    }) as Engine;
    const app = createHttpApp({ engine: racing, pollIntervalMs: 10 });
    try {
      const res = await app.fetch(new Request("http://localhost/api/live/runs/gone"));
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let text = "";
      let ended = false;
      const reading = (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          text += decoder.decode(value, { stream: true });
        }
        ended = true;
      })();
      await until(() => text.includes("event: snapshot"), "the snapshot");
      expect(text).toContain('"run":null');
      await until(() => ended, "the stream ends");
      await reading;
    } finally {
      app.close();
    }
  });
});

describe("an event no wait can ever take", () => {
  const dir = tempDir("cairn-http-findings-names-");
  const waits = workflow({ name: "names", version: "1" }, async (ctx) => {
    await ctx.waitForEvent("go");
  });
  let engine: Engine;
  let app: ReturnType<typeof createHttpApp>;
  const logs: string[] = [];
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [waits],
      pollIntervalMs: 10,
    });
    app = createHttpApp({ engine, log: (m) => logs.push(m) });
    await engine.start(waits, undefined, { id: "n1" });
    await until(async () => (await engine.getRun("n1"))?.status === "waiting", "n1 waits");
  });
  afterAll(async () => {
    app.close();
    await engine.close();
    dir.cleanup();
  });

  it('is refused by name (with "#", or starting with "@" or a space: a wait cannot be named so), not stored to be delivered never', async () => {
    // ctx.waitForEvent("a#b") throws: a wait's name is a call name. Such an event was
    // stored (201), counted against maxPendingEventsPerRun, and never delivered.
    for (const [name, path] of [
      ["go#2", "go%232"],
      ["@go", "%40go"],
      [" go", "%20go"],
    ]) {
      const res = await call<ErrorJson>(app.fetch, "POST", `/api/runs/n1/events/${path}`, {
        body: 1,
      });
      expect([name, res.status, res.body.error?.code]).toEqual([name, 400, "VALIDATION"]);
      expect(res.body.error.message).toMatch(/event name .*no wait/);
      await expect(engine.sendEvent("n1", name!, 1)).rejects.toThrow(TypeError);
    }
    expect(await engine.listEvents("n1")).toEqual([]);
    expect(logs).toEqual([]);
    // What a wait can be named is delivered.
    const ok = await call(app.fetch, "POST", "/api/runs/n1/events/go", { body: 1 });
    expect(ok.status).toBe(201);
    await until(async () => (await engine.getRun("n1"))?.status === "completed", "n1 completes");
  });
});

describe("a live stream opened on a watcher nobody listened to for a while", () => {
  /** A feed over a counter; every change is one "tick". */
  function counterFeed() {
    const state = { value: 0 };
    const feed: Feed<number> = {
      read: async () => state.value,
      snapshot: (n) => ({ event: "snapshot", data: { value: n } }),
      changes: (prev, next) =>
        Array.from({ length: next - prev }, (_, i) => ({
          event: "tick",
          data: { value: prev + i + 1 },
        })),
    };
    return { state, feed };
  }

  it("starts from what is stored now, not from what the watcher read before everyone left: a page reloaded after its run finished does not show it running again", async () => {
    // Polls are an hour apart: only what subscribing reads is seen.
    const hub = new LiveHub({ pollMs: 3_600_000, log: () => {} });
    try {
      const { state, feed } = counterFeed();
      const first: LiveEvent[] = [];
      const off = await hub.subscribe(
        "k",
        () => feed,
        undefined,
        (e) => first.push(e),
      );
      off();
      state.value = 2; // the run changed while nobody watched (the watcher lingers)
      const fresh: LiveEvent[] = [];
      await hub.subscribe(
        "k",
        () => feed,
        undefined,
        (e) => fresh.push(e),
      );
      expect(fresh.map((e) => [e.event, e.data])).toEqual([["snapshot", { value: 2 }]]);
      // A client that reconnects with the id it last got is caught up with what it missed.
      const back: LiveEvent[] = [];
      await hub.subscribe(
        "k",
        () => feed,
        first[0]!.id,
        (e) => back.push(e),
      );
      expect(back.map((e) => e.data)).toEqual([{ value: 1 }, { value: 2 }]);
    } finally {
      hub.close();
    }
  });
});
