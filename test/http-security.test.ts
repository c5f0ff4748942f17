// Who may use the HTTP API and dashboard, and what hostile input does to them:
// - a bind other than loopback without a token refuses to start;
// - no token or a wrong one is a 401 (JSON for the API, the sign-in page for pages), the
//   read-only token reads but gets 403 when it acts, sign-in sets a session cookie;
// - a foreign Host (DNS rebinding) and a cross-site state-changing request are refused;
// - bodies over the limit are a 413;
// - hostile strings in filters, ids and names are answered (400/404), never a 500, and
//   are escaped in the pages; a stored value the codec cannot decode is shown as a
//   placeholder and its text appears in no answer and no log line.

import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { createHttpApp, type HttpApp, serveHttp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { BACKENDS, pgUrl, useHarness } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { withClient } from "./helpers/postgres.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const TOKEN = "full-token-0123456789";
const READ = "read-token-0123456789";

const waits = workflow({ name: "waits", version: "1" }, async (ctx) => {
  await ctx.step("first", () => ({ ok: true }));
  await ctx.waitForEvent("go");
  return "done";
});

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A SQLite store with one waiting run, an engine that executes it, and an app. */
async function setup(options: Omit<Parameters<typeof createHttpApp>[0], "engine"> = {}) {
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  const engine = createEngine({
    store: sqliteStore(db.path),
    workflows: [waits],
    pollIntervalMs: 10,
  });
  cleanups.push(() => engine.close());
  await engine.start(waits, undefined, { id: "run-1" });
  await until(async () => (await engine.getRun("run-1"))?.status === "waiting", "run-1 waits");
  const app = createHttpApp({ engine, ...options });
  cleanups.push(() => app.close());
  return { engine, app, dbPath: db.path };
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe("binding", () => {
  it("refuses to listen beyond loopback without a token, and starts with one", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const engine = createEngine({ store: sqliteStore(db.path), worker: false });
    cleanups.push(() => engine.close());
    await expect(serveHttp({ engine, host: "0.0.0.0", port: 0 })).rejects.toThrow(
      /Refusing to listen on 0\.0\.0\.0 without a token/,
    );
    await expect(serveHttp({ engine, host: "::", port: 0 })).rejects.toThrow(/Refusing/);
    expect(() => createHttpApp({ engine, allowedHosts: ["ops.example.com"] })).toThrow(
      /non-loopback host name but has no token/,
    );
    createHttpApp({
      engine,
      allowedHosts: ["ops.example.com"],
      allowUnauthenticated: true,
    }).close();

    const local = await serveHttp({ engine, port: 0 });
    cleanups.push(() => local.close());
    expect(local.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await fetch(`${local.url}/api/runs`)).status).toBe(200);

    const open = await serveHttp({ engine, host: "0.0.0.0", port: 0, token: TOKEN });
    cleanups.push(() => open.close());
    const url = `http://127.0.0.1:${open.port}`;
    expect((await fetch(`${url}/api/runs`)).status).toBe(401);
    expect((await fetch(`${url}/api/runs`, { headers: bearer(TOKEN) })).status).toBe(200);
  });
});

describe("tokens", () => {
  it("answers 401 without a valid token, JSON for the API and the sign-in page for pages", async () => {
    const { app } = await setup({ token: TOKEN, readToken: READ });
    for (const headers of [{}, bearer("wrong-token-000000"), { authorization: "Basic x" }]) {
      const res = await call<{ error: { code: string } }>(app.fetch, "GET", "/api/runs", {
        headers,
      });
      expect([res.status, res.body.error.code]).toEqual([401, "UNAUTHORIZED"]);
    }
    const page = await app.fetch(new Request("http://localhost/runs/run-1"));
    expect(page.status).toBe(401);
    const html = await page.text();
    expect(html).toContain('name="token"');
    expect(html).not.toContain("first");
    const live = await call(app.fetch, "GET", "/api/live/runs");
    expect(live.status).toBe(401);
    expect((await call(app.fetch, "GET", "/api/openapi.json")).status).toBe(401);
    expect((await call(app.fetch, "GET", "/api/runs", { headers: bearer(TOKEN) })).status).toBe(
      200,
    );
    expect((await call(app.fetch, "GET", "/api/runs", { headers: bearer(READ) })).status).toBe(200);
    // Assets carry no data: the sign-in page needs them.
    expect((await app.fetch(new Request("http://localhost/assets/style.css"))).status).toBe(200);
  });

  it("lets the read-only token read but not act (403), and the full token act", async () => {
    const { app, engine } = await setup({ token: TOKEN, readToken: READ });
    const acts: Array<[string, unknown?]> = [
      ["/api/runs/run-1/cancel"],
      ["/api/runs/run-1/events/go", { ok: true }],
      ["/api/runs/run-1/resume"],
      ["/api/runs/run-1/fork", { fromStep: "first" }],
      ["/api/runs", { workflow: "waits" }],
    ];
    for (const [url, body] of acts) {
      const res = await call<{ error: { code: string } }>(app.fetch, "POST", url, {
        headers: bearer(READ),
        ...(body === undefined ? {} : { body }),
      });
      expect([url, res.status, res.body.error.code]).toEqual([url, 403, "FORBIDDEN"]);
    }
    expect((await engine.getRun("run-1"))?.status).toBe("waiting");
    expect(await engine.listEvents("run-1")).toEqual([]);
    expect(await engine.listRuns()).toHaveLength(1);

    const done = await call(app.fetch, "POST", "/api/runs/run-1/cancel", {
      headers: bearer(TOKEN),
    });
    expect(done.status).toBe(200);
    expect((await engine.getRun("run-1"))?.status).toBe("canceled");
  });

  it("signs a browser in with a session cookie (form or ?token= link) and out again", async () => {
    const { app } = await setup({ token: TOKEN, readToken: READ });
    const login = (token: string, next = "/runs/run-1") =>
      app.fetch(
        new Request("http://localhost/login", {
          method: "POST",
          headers: {
            "content-type": "application/x-www-form-urlencoded",
            origin: "http://localhost",
          },
          body: new URLSearchParams({ token, next }).toString(),
        }),
      );
    const bad = await login("nope-nope-nope");
    expect(bad.status).toBe(401);
    expect(bad.headers.get("set-cookie")).toBeNull();

    const ok = await login(READ);
    expect(ok.status).toBe(303);
    expect(ok.headers.get("location")).toBe("/runs/run-1");
    const cookie = ok.headers.get("set-cookie") ?? "";
    expect(cookie).toMatch(/cairn_session=[^;]+; Max-Age=\d+; Path=\/; HttpOnly; SameSite=Strict/);
    expect(cookie).not.toContain(READ);
    const session = cookie.split(";")[0]!;
    const page = await app.fetch(
      new Request("http://localhost/runs/run-1", { headers: { cookie: session } }),
    );
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("read-only");
    const act = await call(app.fetch, "POST", "/api/runs/run-1/cancel", {
      headers: { cookie: session, origin: "http://localhost" },
    });
    expect(act.status).toBe(403);

    // An open redirect is not possible through `next`.
    expect((await login(TOKEN, "https://evil.example/")).headers.get("location")).toBe("/");
    expect((await login(TOKEN, "//evil.example/")).headers.get("location")).toBe("/");

    const link = await app.fetch(new Request(`http://localhost/workers?token=${TOKEN}&x=1`));
    expect(link.status).toBe(303);
    expect(link.headers.get("location")).toBe("/workers?x=1");
    const full = (link.headers.get("set-cookie") ?? "").split(";")[0]!;
    const acted = await call(app.fetch, "POST", "/api/runs/run-1/events/go", {
      headers: { cookie: full, origin: "http://localhost" },
      body: 1,
    });
    expect(acted.status).toBe(201);

    const out = await app.fetch(
      new Request("http://localhost/logout", {
        method: "POST",
        headers: { cookie: full, origin: "http://localhost" },
      }),
    );
    expect(out.status).toBe(303);
    expect(out.headers.get("set-cookie")).toMatch(/cairn_session=; Max-Age=0/);
  });
});

describe("Host and Origin", () => {
  it("refuses a foreign Host (DNS rebinding), on reads too", async () => {
    const { app } = await setup();
    for (const host of ["evil.example", "127.0.0.1.nip.io", "localhost.evil.example"]) {
      const res = await call<{ error: { code: string } }>(
        app.fetch,
        "GET",
        `http://${host}/api/runs`,
      );
      expect([host, res.status, res.body.error.code]).toEqual([host, 403, "FORBIDDEN_HOST"]);
      const page = await app.fetch(new Request(`http://${host}/`));
      expect(page.status).toBe(403);
    }
    for (const host of ["localhost:4000", "127.0.0.1:4000", "[::1]:4000", "LOCALHOST"]) {
      expect((await call(app.fetch, "GET", `http://${host}/api/runs`)).status).toBe(200);
    }
    const allowed = createHttpApp({
      engine: (await setup()).engine,
      allowedHosts: ["ops.internal"],
      token: TOKEN,
    });
    cleanups.push(() => allowed.close());
    expect(
      (await call(allowed.fetch, "GET", "http://ops.internal/api/runs", { headers: bearer(TOKEN) }))
        .status,
    ).toBe(200);
  });

  it("refuses a state-changing request from another site, and nothing changes", async () => {
    const { app, engine } = await setup({ allowedOrigins: ["https://ops.example.com"] });
    const attempts: Array<Record<string, string>> = [
      { origin: "https://evil.example" },
      { origin: "http://localhost:9999" },
      { origin: "null" },
      { "sec-fetch-site": "cross-site" },
      { "sec-fetch-site": "same-site" },
    ];
    for (const headers of attempts) {
      const res = await call<{ error: { code: string } }>(
        app.fetch,
        "POST",
        "/api/runs/run-1/cancel",
        { headers },
      );
      expect([headers, res.status, res.body.error.code]).toEqual([
        headers,
        403,
        "FORBIDDEN_ORIGIN",
      ]);
      const form = await app.fetch(
        new Request("http://localhost/api/runs/run-1/events/go", {
          method: "POST",
          headers: { ...headers, "content-type": "text/plain" },
          body: "{}",
        }),
      );
      expect(form.status).toBe(403);
    }
    expect((await engine.getRun("run-1"))?.status).toBe("waiting");
    expect(await engine.listEvents("run-1")).toEqual([]);
    // The app's own pages, a listed origin, and clients that are not browsers may act.
    const own = await call(app.fetch, "POST", "/api/runs/run-1/events/go", {
      headers: { origin: "http://localhost", "sec-fetch-site": "same-origin" },
      body: 1,
    });
    expect(own.status).toBe(201);
    expect(
      (
        await call(app.fetch, "POST", "/api/runs/run-1/events/go", {
          headers: { origin: "https://ops.example.com" },
          body: 2,
        })
      ).status,
    ).toBe(201);
    expect((await call(app.fetch, "POST", "/api/runs/run-1/events/go", { body: 3 })).status).toBe(
      201,
    );
  });

  it("sets security headers on pages and answers", async () => {
    const { app } = await setup();
    const page = await app.fetch(new Request("http://localhost/"));
    expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
    expect(page.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
    expect(page.headers.get("x-content-type-options")).toBe("nosniff");
    expect(page.headers.get("x-frame-options")).toBe("DENY");
  });
});

describe("request bodies", () => {
  it("refuses a body over the limit with 413 before parsing it", async () => {
    const { app, engine } = await setup({ maxBodyBytes: 10_000 });
    const big = { blob: "x".repeat(20_000) };
    const res = await call<{ error: { code: string } }>(
      app.fetch,
      "POST",
      "/api/runs/run-1/events/go",
      { body: big },
    );
    expect([res.status, res.body.error.code]).toEqual([413, "PAYLOAD_TOO_LARGE"]);
    expect(await engine.listEvents("run-1")).toEqual([]);
    const { app: dflt } = await setup();
    const huge = await call<{ error: { code: string } }>(
      dflt.fetch,
      "POST",
      "/api/runs/run-1/events/go",
      {
        raw: `"${"y".repeat(3 * 1024 * 1024)}"`,
        headers: { "content-type": "application/json" },
      },
    );
    expect([huge.status, huge.body.error.code]).toEqual([413, "PAYLOAD_TOO_LARGE"]);
  });
});

describe.each(BACKENDS)("hostile strings on %s", (backend) => {
  const harness = useHarness(backend);

  async function appOn(): Promise<{ app: HttpApp; engine: Engine; logs: string[] }> {
    const h = harness();
    const engine = h.engine([waits]);
    const logs: string[] = [];
    const app = createHttpApp({ engine, log: (m) => logs.push(m) });
    cleanups.push(() => app.close());
    return { app, engine, logs };
  }

  const HOSTILE_IDS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "../../etc/passwd",
    "a/b?c#d e%20f",
    "line\nbreak",
    "ünïcødé 🚀 中文",
  ];

  it("answers hostile filters and ids with 400/404, never a 500, and escapes them in pages", async () => {
    const { app, engine, logs } = await appOn();
    for (const id of HOSTILE_IDS) await engine.start(waits, undefined, { id });
    const filters = [
      "q=%00",
      "q=a%00b",
      "workflow=%00",
      "version=%00",
      "status=%00",
      "view=%00",
      "before=%00",
      "q=%ED%A0%80",
      "q=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
      `q=${"x".repeat(10_000)}`,
      `workflow=${"w".repeat(5_000)}`,
      "limit=1e3",
      "limit=-1",
      "status=,,,",
      "q[]=1&q[]=2",
    ];
    for (const f of filters) {
      const res = await call(app.fetch, "GET", `/api/runs?${f}`);
      expect([f.slice(0, 40), res.status === 200 || res.status === 400]).toEqual([
        f.slice(0, 40),
        true,
      ]);
      const page = await app.fetch(new Request(`http://localhost/?${f}`));
      expect([f.slice(0, 40), page.status === 200 || page.status === 400]).toEqual([
        f.slice(0, 40),
        true,
      ]);
      const html = await page.text();
      expect(html).not.toContain("<script>alert");
    }
    const q = await call<{ runs: Array<{ id: string }> }>(
      app.fetch,
      "GET",
      "/api/runs?q=%3Cscript%3E",
    );
    expect(q.body.runs.map((r) => r.id)).toEqual(["<script>alert(1)</script>"]);

    const ids = [
      "%00",
      "a%00b",
      "%ED%A0%80",
      "x".repeat(5_000),
      "%3Cscript%3Ealert(1)%3C%2Fscript%3E%00",
      "%",
      "%E0%A4%A",
    ];
    for (const raw of ids) {
      for (const path of [
        `/api/runs/${raw}`,
        `/api/runs/${raw}/steps`,
        `/api/runs/${raw}/events`,
        `/api/live/runs/${raw}`,
      ]) {
        const res = await call(app.fetch, "GET", path);
        expect([path.slice(0, 60), [400, 404].includes(res.status)]).toEqual([
          path.slice(0, 60),
          true,
        ]);
      }
      const res = await call(app.fetch, "POST", `/api/runs/${raw}/events/${raw}`, { body: 1 });
      expect([raw.slice(0, 20), [400, 404].includes(res.status)]).toEqual([raw.slice(0, 20), true]);
      const page = await app.fetch(new Request(`http://localhost/runs/${raw}`));
      expect(page.status).toBe(404);
      expect(await page.text()).not.toContain("<script>alert");
    }
    for (const body of [
      { workflow: "waits", id: "bad\u0000id" },
      { workflow: "waits", id: "\ud800" },
      { workflow: "wa\u0000its" },
      { workflow: "waits", budget: { "\u0000": 1 } },
    ]) {
      const res = await call<{ error: { code: string } }>(app.fetch, "POST", "/api/runs", { body });
      expect([res.status, res.body.error.code]).toEqual([400, "VALIDATION"]);
    }
    const name = await call(
      app.fetch,
      "POST",
      `/api/runs/${encodeURIComponent(HOSTILE_IDS[0]!)}/events/${"n".repeat(201)}`,
    );
    expect(name.status).toBe(400);
    const key = await call(
      app.fetch,
      "POST",
      `/api/runs/${encodeURIComponent(HOSTILE_IDS[0]!)}/events/go`,
      {
        headers: { "idempotency-key": "k".repeat(300) },
      },
    );
    expect(key.status).toBe(400);

    for (const id of HOSTILE_IDS) {
      const res = await call<{ run: { id: string } }>(
        app.fetch,
        "GET",
        `/api/runs/${encodeURIComponent(id)}`,
      );
      expect(res.body.run.id).toBe(id);
      const page = await app.fetch(new Request(`http://localhost/runs/${encodeURIComponent(id)}`));
      expect(page.status).toBe(200);
      const html = await page.text();
      expect(html).not.toContain("<script>alert");
      expect(html).not.toContain("<img src=x");
    }
    const list = await (await app.fetch(new Request("http://localhost/"))).text();
    expect(list).toContain("&lt;script&gt;alert(1)&lt;/script&gt;");
    expect(list).not.toContain("<img src=x");
    expect(logs).toEqual([]);
  });

  it("shows a value the codec cannot decode as a placeholder, never its text", async () => {
    const h = harness();
    const engine = h.engine([waits]);
    const logs: string[] = [];
    const app = createHttpApp({ engine, log: (m) => logs.push(m) });
    cleanups.push(() => app.close());
    await engine.start(waits, { hello: "world" }, { id: "garbled" });
    await until(
      async () => (await engine.getRun("garbled"))?.status === "waiting",
      "garbled waits",
    );
    await engine.sendEvent("garbled", "other", { fine: true });
    const SECRET = "SECRET-UNDECODABLE-TEXT";
    const garbage = `[{"a":1},${SECRET}`;
    if (backend === "sqlite") {
      const path = (h.store() as unknown as { path: string }).path;
      const db = new Database(path);
      db.prepare("UPDATE runs SET input = ? WHERE id = ?").run(garbage, "garbled");
      db.prepare("UPDATE steps SET result = ? WHERE run_id = ?").run(garbage, "garbled");
      db.prepare("UPDATE events SET payload = ? WHERE run_id = ?").run(garbage, "garbled");
      db.close();
    } else {
      const schema = (h.store().description.match(/schema "([^"]+)"/) ?? [])[1]!;
      await withClient(pgUrl!, async (c) => {
        await c.query(`UPDATE "${schema}".runs SET input = $1 WHERE id = 'garbled'`, [garbage]);
        await c.query(`UPDATE "${schema}".steps SET result = $1 WHERE run_id = 'garbled'`, [
          garbage,
        ]);
        await c.query(`UPDATE "${schema}".events SET payload = $1 WHERE run_id = 'garbled'`, [
          garbage,
        ]);
      });
    }
    const answers = [
      await call(app.fetch, "GET", "/api/runs/garbled"),
      await call(app.fetch, "GET", "/api/runs/garbled/steps"),
      await call(app.fetch, "GET", "/api/runs/garbled/events"),
      await call(app.fetch, "GET", "/api/runs?q=garbled"),
    ];
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(JSON.stringify(a.body)).not.toContain(SECRET);
    }
    expect(answers[0]!.body).toMatchObject({ run: { input: "[undecodable value]" } });
    expect(answers[1]!.body).toMatchObject({
      steps: [{ key: "first", result: "[undecodable value]" }, { key: "go" }],
    });
    expect(answers[2]!.body).toMatchObject({
      events: [{ name: "other", payload: "[undecodable value]" }],
    });
    const page = await (await app.fetch(new Request("http://localhost/runs/garbled"))).text();
    expect(page).not.toContain(SECRET);
    expect(page).toContain("undecodable value");
    expect(logs.join("\n")).not.toContain(SECRET);
  });
});
