// Found by an adversarial audit of the HTTP API and the dashboard (src/http): each test is
// a bug it found, and failed before its fix.

import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { toJsonValue } from "../src/http/json.js";
import { createEngine, type Engine, StoreError, sqliteStore, workflow } from "../src/index.js";
import { expectFailure, ROOT, startCairn } from "./helpers/cli.js";
import { call } from "./helpers/http.js";
import { tempDir, until } from "./helpers/sqlite.js";

type Json = Record<string, unknown>;
type ErrorJson = { error: { code: string; message: string } };

describe("request bodies are read as they were sent, or refused", () => {
  const dir = tempDir("cairn-http-findings-body-");
  const waits = workflow({ name: "body-check", version: "1" }, async (ctx, input: unknown) => {
    await ctx.waitForEvent("go");
    return input;
  });
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [waits],
      pollIntervalMs: 10,
    });
    await engine.start(waits, undefined, { id: "b1" });
    await until(async () => (await engine.getRun("b1"))?.status === "waiting", "b1 waits");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  const post = (app: ReturnType<typeof createHttpApp>, path: string, body: Uint8Array | string) =>
    app.fetch(
      new Request(`http://localhost${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      }),
    );

  it("a body that is not UTF-8 is a 400 naming the encoding; no event is stored with U+FFFD in place of its bytes", async () => {
    const logs: string[] = [];
    const app = createHttpApp({ engine, log: (m) => logs.push(m) });
    try {
      // {"name":"café"} as Latin-1 (a webhook sender that does not speak UTF-8): é is 0xE9.
      const latin1 = Uint8Array.from([
        ...Buffer.from('{"name":"caf', "latin1"),
        0xe9,
        ...Buffer.from('"}', "latin1"),
      ]);
      const res = await post(app, "/api/runs/b1/events/latin1", latin1);
      const body = (await res.json()) as ErrorJson;
      expect([res.status, body.error?.code]).toEqual([400, "VALIDATION"]);
      expect(body.error.message).toMatch(/UTF-8/);
      expect((await engine.listEvents("b1")).map((e) => e.name)).toEqual([]);
      // A run started with such an input is not created either.
      const start = await post(
        app,
        "/api/runs",
        Buffer.from('{"workflow":"body-check","id":"b2","input":"\xff"}', "latin1"),
      );
      expect(start.status).toBe(400);
      expect(await engine.getRun("b2")).toBeUndefined();
      expect(logs).toEqual([]);

      // UTF-8 (with or without a byte order mark) is read as sent.
      const utf8 = await post(
        app,
        "/api/runs/b1/events/utf8",
        Buffer.from('\ufeff{"name":"café ☕ 𝄞"}', "utf8"),
      );
      expect(utf8.status).toBe(201);
      const [event] = (await engine.listEvents("b1")).filter((e) => e.name === "utf8");
      expect(event?.payload).toEqual({ name: "café ☕ 𝄞" });
    } finally {
      app.close();
    }
  });

  it("a number JSON.parse would change (an integer past 2^53, one out of range) is a 400 naming it, not a different number recorded", async () => {
    const logs: string[] = [];
    const app = createHttpApp({ engine, log: (m) => logs.push(m) });
    try {
      const cases: Array<[string, string, string]> = [
        // A webhook's 64-bit delivery id: recorded as 12345678901234567000 before.
        ["/api/runs/b1/events/big", '{"id": 12345678901234567891}', "12345678901234567891"],
        ["/api/runs/b1/events/big", '{"ids": [1, -9007199254740993]}', "-9007199254740993"],
        // Nested out of range: recorded as Infinity (the top level was refused already).
        ["/api/runs/b1/events/inf", '{"x": {"y": 1e400}}', "1e400"],
        ["/api/runs/b1/events/tiny", '{"x": 1e-400}', "1e-400"],
        ["/api/runs", '{"workflow":"body-check","id":"b3","input":{"n":1e999}}', "1e999"],
        [
          "/api/runs/b1/approvals/nope/approve",
          '{"answer": {"n": 99999999999999999999}}',
          "99999999999999999999",
        ],
      ];
      for (const [path, raw, literal] of cases) {
        const res = await call<ErrorJson>(app.fetch, "POST", path, {
          raw,
          headers: { "content-type": "application/json" },
        });
        expect([raw, res.status, res.body.error?.code]).toEqual([raw, 400, "VALIDATION"]);
        expect(res.body.error.message).toContain(literal);
      }
      expect((await engine.listEvents("b1")).map((e) => e.name)).not.toContain("big");
      expect((await engine.listEvents("b1")).map((e) => e.name)).not.toContain("inf");
      expect(await engine.getRun("b3")).toBeUndefined();
      expect(logs).toEqual([]);

      // Numbers JSON carries exactly are accepted as they are, strings that look like
      // numbers too.
      const ok = await call<Json>(app.fetch, "POST", "/api/runs/b1/events/fine", {
        raw: '{"a": 9007199254740991, "b": -9007199254740991, "c": 1e21, "d": 0.1, "e": 1.5e300, "f": "12345678901234567891", "h": 0e5, "i": 12345678901234567000, "j": 10000000000000000000000}',
        headers: { "content-type": "application/json" },
      });
      expect(ok.status).toBe(201);
      const [fine] = (await engine.listEvents("b1")).filter((e) => e.name === "fine");
      expect(fine?.payload).toEqual({
        a: 9007199254740991,
        b: -9007199254740991,
        c: 1e21,
        d: 0.1,
        e: 1.5e300,
        f: "12345678901234567891",
        h: 0,
        // What a browser's JSON.stringify writes for the double nearest a larger id: it reads
        // back as written.
        i: 12345678901234567000,
        j: 1e22,
      });
    } finally {
      app.close();
    }
  });
});

describe("values nested deep", () => {
  it("an event the store took is answered 201 and stays readable, however deep; one it refused is a 400 and not stored", async () => {
    // In a plain Node process, as `cairn ui` runs (the stack's depth decides where each
    // limit falls): past some nesting the codec cannot store the payload (a 400), and below
    // that the API's JSON view of the stored payload overflowed first: a 500 for an event
    // that was stored (a webhook sender sends it again), then a 500 for every read of the
    // run's events and for its page.
    const child = spawnSync(
      process.execPath,
      ["--import", "tsx", join(ROOT, "test/fixtures/deep-events-child.ts")],
      { cwd: ROOT, encoding: "utf8", timeout: 100_000 },
    );
    expect(child.status, child.stderr).toBe(0);
    const result = JSON.parse(child.stdout) as {
      outcomes: Array<[number, number, number]>;
      events: number;
      page: number;
      logs: string[];
    };
    const wrong = result.outcomes.filter(
      ([, status, stored]) =>
        !(status === 201 && stored === 1) && !(status === 400 && stored === 0),
    );
    expect(wrong).toEqual([]);
    // Both happened: the shallowest nesting was stored, the deepest refused.
    expect(result.outcomes[0]?.[1]).toBe(201);
    expect(result.outcomes[result.outcomes.length - 1]?.[1]).toBe(400);
    expect([result.events, result.page, result.logs]).toEqual([200, 200, []]);

    // The JSON view (now without recursion) shows every shape as before: holes of a sparse
    // array as null, a cycle as "[Circular]", a value met twice (not inside itself) twice.
    const shared = { s: 1 };
    const cyclic: Json = { a: 1 };
    cyclic.self = cyclic;
    // biome-ignore lint/suspicious/noSparseArray: a hole is what is shown
    const sparse = [1, , 3];
    expect(
      toJsonValue({
        sparse,
        cyclic,
        twice: [shared, shared],
        map: new Map<unknown, unknown>([[1, new Set([2n])]]),
      }),
    ).toEqual({
      sparse: [1, null, 3],
      cyclic: { a: 1, self: "[Circular]" },
      twice: [{ s: 1 }, { s: 1 }],
      map: [[1, ["2"]]],
    });
  });
});

describe("the app's routes taken into another Hono app (route())", () => {
  const dir = tempDir("cairn-http-findings-mount-");
  let engine: Engine;
  beforeAll(() => {
    engine = createEngine({ store: sqliteStore(join(dir.dir, "cairn.db")), worker: false });
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("leave the owner's routes outside the base path alone: no token, Host or Origin check, no CSP of the dashboard", async () => {
    const app = createHttpApp({ engine, basePath: "/ops/cairn", token: "mount-token-123" });
    try {
      for (const mount of ["/", "/svc"]) {
        const outer = new Hono();
        outer.route(mount, app.hono);
        // Registered after the app's routes, as an owner adding a route later does.
        outer.get("/health", (c) => c.text("ok"));
        outer.post("/webhook", (c) => c.text("got it"));
        const prefix = mount === "/" ? "" : mount;
        const ask = (method: string, url: string, headers: Record<string, string> = {}) =>
          outer.fetch(new Request(url, { method, headers }));

        const health = await ask("GET", "http://localhost/health");
        expect([mount, health.status, await health.text()]).toEqual([mount, 200, "ok"]);
        expect(health.headers.get("content-security-policy")).toBeNull();
        // The owner's server answers to its own names, and takes posts from its partners.
        const named = await ask("GET", "http://status.example.com/health");
        expect([mount, named.status]).toEqual([mount, 200]);
        const hook = await ask("POST", "http://localhost/webhook", {
          origin: "https://partner.example",
        });
        expect([mount, hook.status, await hook.text()]).toEqual([mount, 200, "got it"]);

        // The app's own routes keep every check, wherever the owner put them.
        const runs = await ask("GET", `http://localhost${prefix}/ops/cairn/api/runs`);
        expect([mount, runs.status]).toEqual([mount, 401]);
        expect(runs.headers.get("content-security-policy")).toContain("default-src 'none'");
        const authed = await ask("GET", `http://localhost${prefix}/ops/cairn/api/runs`, {
          authorization: "Bearer mount-token-123",
        });
        expect([mount, authed.status]).toEqual([mount, 200]);
        const foreign = await ask("GET", `http://evil.example${prefix}/ops/cairn/api/runs`, {
          authorization: "Bearer mount-token-123",
        });
        expect([mount, foreign.status]).toEqual([mount, 403]);
        const page = await ask("GET", `http://localhost${prefix}/ops/cairn/`);
        expect([mount, page.status]).toEqual([mount, 401]);
      }
    } finally {
      app.close();
    }
  });
});

describe("tokens an Authorization header cannot carry", () => {
  const dir = tempDir("cairn-http-findings-token-");
  let engine: Engine;
  beforeAll(() => {
    engine = createEngine({ store: sqliteStore(join(dir.dir, "cairn.db")), worker: false });
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  // Each signed the dashboard in through the login form, while every API client (curl,
  // cairn's CLI, a webhook sender) got a 401 with the same token, unable to say why.
  const unsendable = [
    ["a secret file's trailing newline", "secret-token-1\n", /line break/],
    ["a space", "my secret token", /space/],
    ["a character outside ASCII", "pässwört-1234", /outside ASCII/],
  ] as const;

  it("is refused when the app is made, naming the option and why", () => {
    for (const [what, token, why] of unsendable) {
      expect(() => createHttpApp({ engine, token }), what).toThrow(why);
      expect(
        () => createHttpApp({ engine, token: "a-full-token-123", readToken: token }),
        what,
      ).toThrow(/readToken/);
    }
    // Printable ASCII is what a header carries: such a token works as a bearer token.
    const app = createHttpApp({ engine, token: "A~z!#$%&'*+-./09:;<=>?@[]^_`{|}" });
    app.close();
  });

  it("is refused by cairn ui as a usage error", async () => {
    const ui = startCairn(["ui", "--store", join(dir.dir, "cairn.db"), "--port", "0"], {
      CAIRN_UI_TOKEN: "secret-token-1\n",
    });
    // Before the fix it served (and would have served until killed).
    let exited = false;
    const ended = ui.done.then(() => {
      exited = true;
    });
    await until(() => exited || ui.output.stdout.includes("cairn ui:"), "cairn ui answers", 60_000);
    if (!exited) ui.child.kill();
    await ended;
    expect(ui.output.stdout).not.toContain("cairn ui:");
    expectFailure(await ui.done, 2, /--token holds a line break/);
  });
});

describe("the live stream of a run deleted while it is watched", () => {
  const dir = tempDir("cairn-http-findings-gone-");
  const quick = workflow({ name: "gone-check", version: "1" }, async (ctx) => {
    await ctx.step("only", () => 1);
  });
  const store = sqliteStore(join(dir.dir, "cairn.db"));
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({ store, workflows: [quick], pollIntervalMs: 10 });
    await engine.start(quick, undefined, { id: "gone" });
    await until(
      async () => (await engine.getRun("gone"))?.status === "completed",
      "gone completes",
    );
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("says the run is gone and ends, instead of polling a run that is gone for as long as the page stays open", async () => {
    const logs: string[] = [];
    const app = createHttpApp({ engine, pollIntervalMs: 10, log: (m) => logs.push(m) });
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
      // Retention deletes the finished run.
      expect(await store.deleteRun("gone")).toMatchObject({ deleted: true });
      await until(() => ended, "the stream ends");
      await reading;
      expect(text).toContain('event: run\ndata: {"run":null}');
      // Opened again (EventSource reconnects), it is a 404: EventSource stops there.
      const again = await app.fetch(new Request("http://localhost/api/live/runs/gone"));
      expect(again.status).toBe(404);

      // A new run under the id (within the watcher's linger): its stream shows it, and
      // is not ended by what the lingering watcher last read (the deleted run).
      await engine.start(quick, undefined, { id: "gone" });
      const next = await app.fetch(new Request("http://localhost/api/live/runs/gone"));
      expect(next.status).toBe(200);
      const nextReader = (next.body as ReadableStream<Uint8Array>).getReader();
      let nextText = "";
      let nextEnded = false;
      const nextReading = (async () => {
        for (;;) {
          const { done, value } = await nextReader.read();
          if (done) break;
          nextText += decoder.decode(value, { stream: true });
        }
        nextEnded = true;
      })();
      await until(() => nextText.includes('"id":"gone"') || nextEnded, "the new run is shown");
      expect(nextEnded).toBe(false);
      await nextReader.cancel();
      await nextReading;
      expect(logs).toEqual([]);
    } finally {
      app.close();
    }
  });
});

describe("the runs list: one URL, the same runs on the page, in the API and in its live stream", () => {
  const dir = tempDir("cairn-http-findings-empty-");
  const quick = workflow({ name: "empty-check", version: "1" }, async (ctx) => {
    await ctx.step("only", () => 1);
  });
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [quick],
      pollIntervalMs: 10,
    });
    for (const id of ["e1", "e2"]) await engine.start(quick, undefined, { id });
    await until(
      async () => (await engine.listRuns({ status: "completed" })).length === 2,
      "both complete",
    );
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  // An empty field of a filter form (?workflow=&q=) filters nothing on the page; the API
  // and the live stream took it as "workflow is the empty name" (no runs), or refused it.
  it("an empty filter value means no filter in all three", async () => {
    const app = createHttpApp({ engine, pollIntervalMs: 10 });
    try {
      for (const query of [
        "workflow=",
        "version=",
        "status=",
        "view=",
        "limit=",
        "before=",
        "q=",
      ]) {
        const pageHtml = await (await app.fetch(new Request(`http://localhost/?${query}`))).text();
        const onPage = [...pageHtml.matchAll(/<tr data-run="([^"]+)"/g)].map((m) => m[1]);
        const api = await call<{ runs: Json[] }>(app.fetch, "GET", `/api/runs?${query}`);
        const live = await app.fetch(new Request(`http://localhost/api/live/runs?${query}`));
        let inStream: unknown[] | undefined;
        if (live.status === 200) {
          const reader = (live.body as ReadableStream<Uint8Array>).getReader();
          let text = "";
          while (!text.includes("event: snapshot")) {
            const { value } = await reader.read();
            text += new TextDecoder().decode(value);
          }
          await reader.cancel();
          const data = text.split("event: snapshot\ndata: ")[1]?.split("\n")[0];
          inStream = (JSON.parse(data ?? "{}") as { runs: Json[] }).runs.map((r) => r.id);
        }
        expect([query, api.status, api.body.runs?.map((r) => r.id), live.status, inStream]).toEqual(
          [query, 200, onPage, 200, onPage],
        );
        expect(onPage).toHaveLength(2);
      }
    } finally {
      app.close();
    }
  });
});

describe("a live stream opened while the store cannot be read", () => {
  const dir = tempDir("cairn-http-findings-failing-");
  let real: Engine;
  beforeAll(() => {
    real = createEngine({ store: sqliteStore(join(dir.dir, "cairn.db")), worker: false });
  });
  afterAll(async () => {
    await real.close();
    dir.cleanup();
  });

  /** An event stream read into text as it arrives. */
  async function openText(fetch: (r: Request) => Promise<Response>, url: string) {
    const res = await fetch(new Request(url));
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    const s = { text: "", close: () => reader.cancel() };
    void (async () => {
      for (;;) {
        const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
        if (done) break;
        s.text += decoder.decode(value, { stream: true });
      }
    })();
    return s;
  }

  it("is told so, as the streams already open were: not left showing the last reading as live", async () => {
    let failing = false;
    const engine: Engine = Object.create(real, {
      listRuns: {
        value: (filter: Parameters<Engine["listRuns"]>[0]) =>
          failing ? Promise.reject(new StoreError("the store is down")) : real.listRuns(filter),
      },
    });
    const app = createHttpApp({ engine, pollIntervalMs: 10, log: () => {} });
    try {
      const down = '{"ok":false,"message":"The store cannot be read; retrying"}';
      const first = await openText(app.fetch, "http://localhost/api/live/runs");
      await until(() => first.text.includes("event: snapshot"), "the first snapshot");
      failing = true;
      await until(() => first.text.includes(down), "the first stream hears of the failure");
      // Another tab opens the same page now: it gets the last reading (the watcher's) ...
      const second = await openText(app.fetch, "http://localhost/api/live/runs");
      await until(() => second.text.includes("event: snapshot"), "the second snapshot");
      // ... and must learn that it is not live.
      await until(() => second.text.includes(down), "the second stream hears of the failure");
      failing = false;
      const up = 'event: problem\ndata: {"ok":true}';
      await until(
        () => first.text.includes(up) && second.text.includes(up),
        "both hear it is back",
      );
      await first.close();
      await second.close();
    } finally {
      app.close();
    }
  });
});

describe("live streams when the engine behind the app closes", () => {
  const dir = tempDir("cairn-http-findings-closed-");
  afterAll(() => dir.cleanup());

  it("each stream is told and ends, instead of polling a closed engine and saying the store cannot be read", async () => {
    // A run still waiting: its model stream stays open too.
    const quick = workflow({ name: "closed-check", version: "1" }, async (ctx) => {
      await ctx.step("only", () => 1);
      await ctx.waitForEvent("never");
    });
    const engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [quick],
      pollIntervalMs: 10,
    });
    await engine.start(quick, undefined, { id: "c1" });
    await until(async () => (await engine.getRun("c1"))?.status === "waiting", "c1 waits");
    const logs: string[] = [];
    const app = createHttpApp({ engine, pollIntervalMs: 10, log: (m) => logs.push(m) });
    try {
      const urls = [
        "/api/live/runs",
        "/api/live/runs/c1",
        "/api/live/workers",
        "/api/live/runs/c1/stream",
      ];
      const streams = await Promise.all(
        urls.map(async (url) => {
          const res = await app.fetch(new Request(`http://localhost${url}`));
          const reader = (res.body as ReadableStream<Uint8Array>).getReader();
          const decoder = new TextDecoder();
          const s = { url, text: "", ended: false };
          void (async () => {
            for (;;) {
              const { done, value } = await reader.read();
              if (done) break;
              s.text += decoder.decode(value, { stream: true });
            }
            s.ended = true;
          })();
          return s;
        }),
      );
      await until(() => streams.every((s) => s.text.includes("retry:")), "every stream opens");
      await until(
        () => streams.slice(0, 3).every((s) => s.text.includes("event: snapshot")),
        "the snapshots",
      );
      // The owner closes the engine (shutting down), the app's streams still open.
      await engine.close();
      await until(() => streams.every((s) => s.ended), "every stream ends");
      for (const s of streams) {
        expect([s.url, s.text]).toEqual([s.url, expect.stringContaining("engine has closed")]);
        expect([s.url, s.text]).toEqual([
          s.url,
          expect.not.stringContaining("store cannot be read"),
        ]);
      }
      // Opened again meanwhile, they say the same and end.
      const again = await app.fetch(new Request("http://localhost/api/live/runs"));
      const text = await again.text();
      expect(text).toContain("engine has closed");
      expect(logs).toEqual([]);
    } finally {
      app.close();
      await engine.close();
    }
  });
});
