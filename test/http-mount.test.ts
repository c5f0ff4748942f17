// The app mounted in a user's own Node server under a base path: its API, pages, assets and
// live streams answer below the path (links included), the rest of the server is left to
// its owner, and a Hono app can take the routes as they are.

import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp, type HttpApp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { call, openStream } from "./helpers/http.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const hello = workflow({ name: "hello", version: "1" }, async (ctx) => ctx.step("say", () => "hi"));

describe("mounted under /ops/cairn in a node:http server", () => {
  const db = tempDbPath();
  let engine: Engine;
  let app: HttpApp;
  let server: Server;
  let base: string;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db.path), workflows: [hello], pollIntervalMs: 10 });
    await engine.start(hello, undefined, { id: "hello-1" });
    await until(async () => (await engine.getRun("hello-1"))?.status === "completed", "done");
    app = createHttpApp({
      engine,
      basePath: "/ops/cairn",
      pollIntervalMs: 20,
      token: "mount-token-123",
    });
    server = createServer((req, res) => {
      if (req.url?.startsWith("/ops/cairn")) return app.requestListener(req, res);
      res.end("the owner's own route");
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    app.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await engine.close();
    db.cleanup();
  });

  const auth = { authorization: "Bearer mount-token-123" };

  it("answers the API, pages, assets and live streams below the base path", async () => {
    const runs = await fetch(`${base}/ops/cairn/api/runs`, { headers: auth });
    expect(runs.status).toBe(200);
    expect(((await runs.json()) as { runs: unknown[] }).runs).toHaveLength(1);
    const doc = (await (
      await fetch(`${base}/ops/cairn/api/openapi.json`, { headers: auth })
    ).json()) as {
      servers: Array<{ url: string }>;
    };
    expect(doc.servers).toEqual([{ url: "/ops/cairn" }]);

    const page = await fetch(`${base}/ops/cairn/`, { headers: auth });
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('href="/ops/cairn/runs/hello-1"');
    expect(html).toContain('src="/ops/cairn/assets/app.js');
    expect(html).toContain('data-live="/ops/cairn/api/live/runs');
    expect((await fetch(`${base}/ops/cairn/assets/style.css`)).status).toBe(200);
    expect((await fetch(`${base}/ops/cairn/runs/hello-1`, { headers: auth })).status).toBe(200);

    const stream = await openStream(`${base}/ops/cairn/api/live/runs/hello-1`, auth);
    const snap = await stream.next((m) => m.event === "snapshot", "snapshot");
    expect(snap.data).toMatchObject({ run: { id: "hello-1", status: "completed", output: "hi" } });
    stream.close();

    expect(await (await fetch(`${base}/elsewhere`)).text()).toBe("the owner's own route");
    expect((await fetch(`${base}/ops/cairn/api/runs`)).status).toBe(401);
  });

  it("scopes the session cookie to the base path", async () => {
    const res = await fetch(`${base}/ops/cairn/?token=mount-token-123`, { redirect: "manual" });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/ops/cairn/");
    expect(res.headers.get("set-cookie")).toContain("Path=/ops/cairn;");
  });

  it("gives its routes to a Hono app as they are", async () => {
    const outer = new Hono();
    outer.get("/health", (c) => c.text("ok"));
    outer.route("/", app.hono);
    const res = await call<{ runs: unknown[] }>(outer.fetch, "GET", "/ops/cairn/api/runs", {
      headers: auth,
    });
    expect([res.status, res.body.runs.length]).toEqual([200, 1]);
    expect(await (await outer.fetch(new Request("http://localhost/health"))).text()).toBe("ok");
  });

  it("refuses a base path that is not one", () => {
    for (const basePath of ["cairn", "/cairn/", "/ca irn", "/<x>", "/a<", "//a", "/a//b"]) {
      expect(() => createHttpApp({ engine, basePath })).toThrow(/basePath/);
    }
  });
});

describe("an app whose engine has closed", () => {
  it("answers 503 ENGINE_CLOSED, not a 500", async () => {
    const db = tempDbPath();
    const engine = createEngine({ store: sqliteStore(db.path), workflows: [hello], worker: false });
    const app = createHttpApp({ engine, log: () => {} });
    await engine.close();
    const res = await app.fetch(new Request("http://127.0.0.1/api/runs"));
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("ENGINE_CLOSED");
    db.cleanup();
  });
});

// Hono's own way to put an app under a path is route("/svc", app.hono): the app's routes
// answer at /svc/<basePath>/..., which the app itself cannot know when it is made. Its
// links, sign-in, cookie and API errors went to the paths without "/svc" (the login page
// answered 401 to its own form).
describe("taken into a Hono app under a prefix of its own (route('/svc', app.hono))", () => {
  const db = tempDbPath();
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db.path), workflows: [hello], pollIntervalMs: 10 });
    await engine.start(hello, undefined, { id: "hello-1" });
    await until(async () => (await engine.getRun("hello-1"))?.status === "completed", "done");
  });
  afterAll(async () => {
    await engine.close();
    db.cleanup();
  });

  it("keeps every check under a prefix with parameters, and builds no link from the request's path", async () => {
    const app = createHttpApp({ engine, basePath: "/ops/cairn", token: "mount-token-123" });
    try {
      const outer = new Hono();
      outer.route("/t/:tenant", app.hono);
      const ask = (path: string, init: RequestInit = {}) =>
        outer.fetch(new Request(`http://localhost${path}`, { redirect: "manual", ...init }));
      expect((await ask("/t/acme/ops/cairn/api/runs")).status).toBe(401);
      const auth = { authorization: "Bearer mount-token-123" };
      expect((await ask("/t/acme/ops/cairn/api/runs", { headers: auth })).status).toBe(200);
      // A tenant segment is the request's own text: it reaches no cookie attribute.
      const link = await ask("/t/x;Domain=evil.example/ops/cairn/?token=mount-token-123");
      expect(link.status).toBe(303);
      expect(link.headers.get("set-cookie")).toContain("Path=/ops/cairn;");
      expect(link.headers.get("set-cookie")).not.toContain("evil");
    } finally {
      app.close();
    }
  });

  for (const basePath of ["", "/ops/cairn"]) {
    it(`signs in, links and answers below the prefix (basePath ${JSON.stringify(basePath)})`, async () => {
      const app = createHttpApp({ engine, basePath, token: "mount-token-123" });
      try {
        const outer = new Hono();
        outer.get("/health", (c) => c.text("ok"));
        outer.route("/svc", app.hono);
        const at = `/svc${basePath}`;
        const ask = (path: string, init: RequestInit = {}) =>
          outer.fetch(new Request(`http://localhost${path}`, { redirect: "manual", ...init }));

        // Hono answers the root app's "/" at "/svc" only: "/svc/" leads there.
        const home = basePath === "" ? at : `${at}/`;
        if (basePath === "") {
          const slash = await ask(`${at}/?status=running`);
          expect([slash.status, slash.headers.get("location")]).toEqual([
            308,
            `${at}?status=running`,
          ]);
        }
        const login = await ask(home);
        expect(login.status).toBe(401);
        const form = await login.text();
        expect(form).toContain(`action="${at}/login"`);
        expect(form).toContain(`name="next" value="${home}"`);

        const signedIn = await ask(`${at}/login`, {
          method: "POST",
          headers: {
            "content-type": "application/x-www-form-urlencoded",
            origin: "http://localhost",
          },
          body: `token=mount-token-123&next=${encodeURIComponent(`${at}/`)}`,
        });
        expect(signedIn.status).toBe(303);
        expect(signedIn.headers.get("location")).toBe(`${at}/`);
        const cookie = signedIn.headers.get("set-cookie") ?? "";
        expect(cookie).toContain(`Path=${at};`);

        const session = { cookie: cookie.split(";")[0]! };
        const page = await ask(home, { headers: session });
        expect(page.status).toBe(200);
        const html = await page.text();
        expect(html).toContain(`href="${at}/runs/hello-1"`);
        expect(html).toContain(`src="${at}/assets/app.js`);
        expect((await ask(`${at}/assets/style.css`)).status).toBe(200);

        // An API error is JSON, as it is at the root.
        const missing = await ask(`${at}/api/runs/nope`, {
          headers: { authorization: "Bearer mount-token-123" },
        });
        expect(missing.status).toBe(404);
        expect(missing.headers.get("content-type")).toContain("application/json");
        const doc = (await (
          await ask(`${at}/api/openapi.json`, {
            headers: { authorization: "Bearer mount-token-123" },
          })
        ).json()) as { servers: Array<{ url: string }> };
        expect(doc.servers).toEqual([{ url: at }]);

        // A link carrying ?token= signs in and stays below the prefix.
        const link = await ask(`${at}/runs/hello-1?token=mount-token-123`);
        expect(link.status).toBe(303);
        expect(link.headers.get("location")).toBe(`${at}/runs/hello-1`);

        expect(await (await ask("/health")).text()).toBe("ok");
      } finally {
        app.close();
      }
    });
  }
});
