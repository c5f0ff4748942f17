// Findings on: cairn/http under a route() prefix, close() and durations,
// and the PostgreSQL store's drain, LISTEN connection and hostile ids.

import { Hono } from "hono";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { sessionsBlockedBy, testSchema } from "./helpers/postgres.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const hello = workflow({ name: "hello", version: "1" }, async (ctx) => ctx.step("say", () => "hi"));

describe("cairn/http under a route() prefix with parameters", () => {
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

  const ask = (outer: Hono, path: string, init: RequestInit = {}) =>
    outer.fetch(new Request(`http://localhost${path}`, { redirect: "manual", ...init }));

  // The open paths (login, assets, approval links) were compared with the base ("" here),
  // not with the path below the prefix: a tenant named "assets" or "approvals", or one
  // named "login" (the runs page at "/:tenant"), opened the API and the dashboard to
  // anyone.
  it("opens no route of the app to a caller without a token whatever a parameter says", async () => {
    const app = createHttpApp({ engine, token: "mount-token-123", log: () => {} });
    try {
      const outer = new Hono();
      outer.route("/:tenant", app.hono);
      for (const path of ["/assets/api/runs", "/approvals/api/runs", "/login"]) {
        const res = await ask(outer, path);
        expect([path, res.status]).toEqual([path, 401]);
      }
      // Its own open paths stay open below the prefix.
      expect((await ask(outer, "/acme/login")).status).toBe(200);
      expect((await ask(outer, "/acme/assets/style.css")).status).toBe(200);
    } finally {
      app.close();
    }
  });

  it("with a basePath and two parameters, an API path stays closed", async () => {
    const app = createHttpApp({
      engine,
      basePath: "/cairn",
      token: "mount-token-123",
      log: () => {},
    });
    try {
      const outer = new Hono();
      outer.route("/:a/:b", app.hono);
      const res = await ask(outer, "/cairn/assets/cairn/api/runs");
      expect(res.status).toBe(401);
      expect(res.headers.get("content-type")).toContain("application/json");
    } finally {
      app.close();
    }
  });

  it("a prefix whose extent is unknown (a wildcard, a regular expression) opens nothing", async () => {
    for (const prefix of ["/*", "/:p{.+}"]) {
      const app = createHttpApp({ engine, token: "mount-token-123", log: () => {} });
      try {
        const outer = new Hono();
        outer.route(prefix, app.hono);
        for (const path of ["/assets/api/runs", "/login", "/assets/x/api/runs"]) {
          expect([prefix, path, (await ask(outer, path)).status]).toEqual([prefix, path, 401]);
        }
      } finally {
        app.close();
      }
    }
  });

  // Under "/t/:tenant" every request was taken as the app's: the owner's own routes beside
  // the app's basePath got its 401 and its CSP.
  it("leaves the owner's routes beside the basePath alone", async () => {
    const app = createHttpApp({
      engine,
      basePath: "/ops/cairn",
      token: "mount-token-123",
      log: () => {},
    });
    try {
      const outer = new Hono();
      outer.route("/t/:tenant", app.hono);
      outer.get("/t/:tenant/health", (c) => c.text("ok"));
      const own = await ask(outer, "/t/acme/health");
      expect([own.status, await own.text()]).toEqual([200, "ok"]);
      expect(own.headers.get("content-security-policy")).toBeNull();
      expect((await ask(outer, "/t/acme/ops/cairn/api/runs")).status).toBe(401);
    } finally {
      app.close();
    }
  });
});

describe("cairn/http taken into a Hono app: an API path no route has", () => {
  const db = tempDbPath();
  let engine: Engine;
  beforeAll(() => {
    engine = createEngine({ store: sqliteStore(db.path), workflows: [hello], worker: false });
  });
  afterAll(async () => {
    await engine.close();
    db.cleanup();
  });

  // Hono's route() carries the routes over, not the app's notFound: the other app's
  // notFound answered "404 Not Found" as text where API clients read a JSON error.
  for (const prefix of ["/", "/svc"]) {
    it(`is a JSON NOT_FOUND under route(${JSON.stringify(prefix)}), as served alone`, async () => {
      const app = createHttpApp({
        engine,
        basePath: "/c",
        token: "mount-token-123",
        log: () => {},
      });
      try {
        const outer = new Hono();
        outer.route(prefix, app.hono);
        const at = prefix === "/" ? "/c" : "/svc/c";
        const res = await outer.fetch(
          new Request(`http://localhost${at}/api/nope`, {
            headers: { authorization: "Bearer mount-token-123" },
          }),
        );
        expect(res.status).toBe(404);
        expect(res.headers.get("content-type")).toContain("application/json");
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe("NOT_FOUND");
      } finally {
        app.close();
      }
    });
  }
});

describe.skipIf(!pgUrl)("PostgreSQL: verbs in flight when close() ends its own pool", () => {
  // close() waits a bound (settled(), 2 s) for the verbs under way, then ends the pool and
  // drops the sockets that do not close within 2 s more. But it awaited pg-pool's end()
  // first, which resolves only once every client is back: a verb waiting for a row lock
  // held elsewhere (or for a server gone silent) held close() until the statement timeout
  // (30 s), and the verb queued behind it for a connection with it.
  it("close() does not wait for a verb held by a lock elsewhere; both verbs settle", {
    timeout: 90_000,
  }, async () => {
    const { schema, drop } = testSchema(pgUrl!);
    const store = postgresStore(pgUrl!, { schema, poolSize: 1 });
    const locker = new pg.Client({ connectionString: pgUrl! });
    locker.on("error", () => {});
    await locker.connect();
    try {
      await store.open({ clock: createVirtualClock() });
      await store.createRun({
        id: "r1",
        workflow: "w",
        version: "1",
        input: "null",
        budgetLimit: {},
      });
      const lockerPid = (await locker.query<{ pid: number }>("SELECT pg_backend_pid() AS pid"))
        .rows[0]?.pid as number;
      await locker.query("BEGIN");
      await locker.query(`SELECT id FROM "${schema}".runs WHERE id = 'r1' FOR UPDATE`);
      const settled = { slow: false, queued: false };
      const note = (p: Promise<unknown>, which: keyof typeof settled) =>
        p.then(
          () => {
            settled[which] = true;
          },
          () => {
            settled[which] = true;
          },
        );
      void note(store.requestCancel("r1", "stop"), "slow");
      // Waits on this locker's lock only: other test files wait for locks of their own.
      await until(
        async () => (await sessionsBlockedBy(pgUrl!, lockerPid)) > 0,
        "the cancel waits for the row lock",
      );
      void note(store.getRun("r1"), "queued");
      await store.close();
      // Before: close() resolved only once the statement timeout had ended the cancel.
      expect(settled.slow).toBe(false);
      await until(() => settled.slow && settled.queued, "both verbs settle", 30_000);
      await locker.query("COMMIT");
    } finally {
      await locker.end().catch(() => {});
      await store.close();
      await drop();
    }
  });
});
