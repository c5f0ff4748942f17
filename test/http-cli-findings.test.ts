// Found by an adversarial audit of the HTTP API, the dashboard and the CLI's output: each
// test is a bug it found (an open redirect after sign-in, terminal escapes and forged lines
// in CLI output, HEAD requests leaving live streams running, cursors and engine refusals
// answered as store or internal errors, run ids no URL can name); it failed before its fix.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { workerLogger } from "../src/cli/worker-log.js";
import { workerEventMessage } from "../src/engine/logger.js";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, FatalError, sqliteStore, workflow } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { cairn } from "./helpers/cli.js";
import { pgUrl } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";

type Json = Record<string, unknown>;
const TOKEN = "findings-full-token-0123";
const KEYS = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];

describe("login: the page a sign-in lands on", () => {
  const dir = tempDir("cairn-findings-login-");
  let engine: Engine;
  beforeAll(() => {
    engine = createEngine({ store: sqliteStore(join(dir.dir, "cairn.db")), worker: false });
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("a next= with a tab (or newline) after the first slash never sends the browser to another site", async () => {
    const app = createHttpApp({ engine, token: TOKEN });
    // The link an attacker sends: the login page keeps next= as its hidden field ...
    const page = await app.fetch(new Request("http://localhost/login?next=/%09/evil.example/x"));
    const field = (await page.text()).match(/name="next" value="([^"]*)"/)?.[1];
    // ... and the sign-in redirects there. Browsers drop tabs and newlines from URLs, so
    // "/\t/evil.example" is "//evil.example": another site.
    for (const next of [
      field ?? "",
      "/\t/evil.example/x",
      "/\n/evil.example/x",
      "/\r/evil.example",
    ]) {
      const res = await app.fetch(
        new Request("http://localhost/login", {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ token: TOKEN, next }).toString(),
        }),
      );
      expect(res.status, JSON.stringify(next)).toBe(303);
      const location = res.headers.get("location") ?? "";
      expect(new URL(location, "http://localhost/").host, JSON.stringify(location)).toBe(
        "localhost",
      );
    }
  });

  it("a ?token= sign-in link never redirects to another site (//host in the path)", async () => {
    const app = createHttpApp({ engine, token: TOKEN });
    const res = await app.fetch(new Request(`http://localhost//evil.example/?token=${TOKEN}`));
    expect(res.status).toBe(303);
    const location = res.headers.get("location") ?? "";
    expect(new URL(location, "http://localhost/").host, location).toBe("localhost");
  });
});

describe("CLI output: text from runs cannot drive the terminal", () => {
  const dir = tempDir("cairn-findings-cli-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  // Clears the screen, sets the window title, and hides what follows.
  const ESC = "\u001b[2J\u001b]0;pwned\u0007\u001b[8m";
  const FORGED = "deploy-prod  deploy@1  completed  -";
  const wf = workflow({ name: "attack-cli", version: "1" }, async (ctx) => {
    try {
      await ctx.step(`fetch ${ESC}`, () => {
        throw new FatalError(`tool said ${ESC}`);
      });
    } catch {}
    return ctx.approval("merge", { request: { summary: "merge?" } });
  });
  const failing = workflow({ name: "attack-cli-fail", version: "1" }, async (ctx) => {
    await ctx.step("boom", () => {
      throw new FatalError(`provider said ${ESC}`);
    });
  });
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(db),
      workflows: [wf, failing],
      pollIntervalMs: 20,
      approvalKeys: KEYS,
    });
    await engine.start(wf, undefined, { id: "cli-esc" });
    // An id (any text but NUL) with a line break: the rest reads as a row of its own.
    await engine.start(failing, undefined, { id: `x\n${FORGED}` });
    const f = await engine.start(failing, undefined, { id: "cli-fail" });
    await f.result().catch(() => {});
    await until(async () => (await engine.getRun("cli-esc"))?.status === "waiting", "waits");
    // Whoever holds an approval link (someone outside, no token) writes the comment.
    const app = createHttpApp({ engine, token: TOKEN });
    const link = await engine.approvalToken("cli-esc", "merge", "approve", { by: "carol" });
    const res = await call<Json>(app.fetch, "POST", `/api/approval-links/${link}`, {
      body: { comment: `LGTM ${ESC}` },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await engine.handle("cli-esc").result();
  }, 60_000);

  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("cairn show prints no escape sequence from a step key, an error or an approval comment", async () => {
    const shown = await cairn(["show", "cli-esc"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain("LGTM");
    expect(shown.stdout).toContain("tool said");
    expect(shown.stdout).not.toContain("\u001b");
    expect(shown.stdout).not.toContain("\u0007");
  });

  it("cairn runs prints no escape sequence from a failed run's error", async () => {
    const listed = await cairn(["runs"], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toContain("provider said");
    expect(listed.stdout).not.toContain("\u001b");
  });

  it("cairn runs and show print an id with a line break on one line: no forged row", async () => {
    const listed = await cairn(["runs"], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout.split("\n").filter((l) => l.startsWith("deploy-prod"))).toEqual([]);
    const shown = await cairn(["show", `x\n${FORGED}`], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout.split("\n").filter((l) => l.startsWith("deploy-prod"))).toEqual([]);
  });
});

/** The first event of a Server-Sent Events answer (or what arrived in 2 s), then closes it. */
async function firstEvents(res: Response): Promise<string> {
  const reader = res.body?.getReader();
  if (!reader) return "";
  const timer = setTimeout(() => void reader.cancel(), 2_000);
  let text = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
      if (/\nevent: /.test(`\n${text}`)) break;
    }
  } finally {
    clearTimeout(timer);
    await reader.cancel().catch(() => {});
  }
  return text;
}

describe("page cursors (?before=) that are not ones", () => {
  const dir = tempDir("cairn-findings-cursor-");
  let engine: Engine;
  const logs: string[] = [];
  beforeAll(() => {
    engine = createEngine({ store: sqliteStore(join(dir.dir, "cairn.db")), worker: false });
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("the live list answers a malformed cursor with 400, not a stream saying the store cannot be read", async () => {
    const app = createHttpApp({ engine, log: (m) => logs.push(m) });
    try {
      const listed = await call(app.fetch, "GET", "/api/runs?before=garbage");
      expect(listed.status).toBe(400);
      const res = await app.fetch(new Request("http://localhost/api/live/runs?before=garbage"));
      const text = await firstEvents(res);
      expect(text).not.toContain("The store cannot be read");
      expect(res.status, text).toBe(400);
    } finally {
      app.close();
    }
  });

  it.runIf(pgUrl)(
    "a cursor whose id holds NUL is a 400 on PostgreSQL, not 503 STORE (API), 500 (page) or a store problem (live)",
    async () => {
      const { schema, drop } = testSchema(pgUrl!, "cairn_http_findings");
      const pg = createEngine({ store: postgresStore(pgUrl!, { schema }), worker: false });
      const pgLogs: string[] = [];
      const app = createHttpApp({ engine: pg, log: (m) => pgLogs.push(m) });
      try {
        const cursor = Buffer.from("1:\u0000x", "utf8").toString("base64url");
        const api = await call<{ error: { code: string } }>(
          app.fetch,
          "GET",
          `/api/runs?before=${cursor}`,
        );
        expect([api.status, api.body.error?.code]).toEqual([400, "VALIDATION"]);
        const page = await app.fetch(new Request(`http://localhost/?before=${cursor}`));
        expect(page.status).toBe(400);
        const live = await app.fetch(
          new Request(`http://localhost/api/live/runs?before=${cursor}`),
        );
        const text = await firstEvents(live);
        expect(live.status, text).toBe(400);
        expect(pgLogs).toEqual([]);
      } finally {
        app.close();
        await pg.close();
        await drop();
      }
    },
  );
});

describe("requests the engine refuses are 400s, never a 500 INTERNAL", () => {
  const dir = tempDir("cairn-findings-400-");
  const waits = workflow({ name: "attack-400", version: "1" }, async (ctx) => {
    await ctx.step("first", () => 1);
    await ctx.waitForEvent("go");
  });
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [waits],
      pollIntervalMs: 10,
    });
    await engine.start(waits, undefined, { id: "w1" });
    await until(async () => (await engine.getRun("w1"))?.status === "waiting", "w1 waits");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("a budget named __proto__, a run id starting with a space, a fork onto an impossible version", async () => {
    const logs: string[] = [];
    const app = createHttpApp({ engine, log: (m) => logs.push(m) });
    const cases: Array<[string, string]> = [
      ["/api/runs", '{"workflow":"attack-400","id":"p1","budget":{"__proto__":1}}'],
      ["/api/runs", '{"workflow":"attack-400","id":" spaced"}'],
      ["/api/runs/w1/resume", '{"budget":{"__proto__":1}}'],
      ["/api/runs/w1/fork", '{"fromStep":"first","version":"not a version!"}'],
      ["/api/runs/w1/fork", '{"fromStep":"first","id":" spaced"}'],
    ];
    try {
      for (const [path, raw] of cases) {
        const res = await call<{ error: { code: string } }>(app.fetch, "POST", path, {
          raw,
          headers: { "content-type": "application/json" },
        });
        expect([path, raw, res.status, res.body.error?.code]).toEqual([
          path,
          raw,
          400,
          "VALIDATION",
        ]);
      }
      expect(logs).toEqual([]);
      // Nothing was created.
      expect(await engine.getRun("p1")).toBeUndefined();
    } finally {
      app.close();
    }
  });
});

describe("run ids no URL can name", () => {
  const dir = tempDir("cairn-findings-dots-");
  const waits = workflow({ name: "attack-dots", version: "1" }, async (ctx) => {
    await ctx.step("first", () => 1);
    await ctx.waitForEvent("go");
  });
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [waits],
      pollIntervalMs: 10,
    });
    await engine.start(waits, undefined, { id: "d1" });
    await until(async () => (await engine.getRun("d1"))?.status === "waiting", "d1 waits");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it('a run started (or forked) over HTTP as "." or ".." is reachable there, named "%20." and "%20.."', async () => {
    const app = createHttpApp({ engine });
    try {
      const started = await call<Json>(app.fetch, "POST", "/api/runs", {
        body: { workflow: "attack-dots", id: "." },
      });
      const forked = await call<Json>(app.fetch, "POST", "/api/runs/d1/fork", {
        body: { fromStep: "first", id: ".." },
      });
      expect([started.status, forked.status]).toEqual([201, 201]);
      for (const id of [".", ".."]) {
        // As itself, the segment is resolved away: the URL is another one's.
        const asItself = await call<Json>(app.fetch, "GET", `/api/runs/${id}`);
        expect(asItself.status).toBe(404);
        const read = await call<Json>(app.fetch, "GET", `/api/runs/%20${id}`);
        expect([id, read.status, (read.body.run as Json).id]).toEqual([id, 200, id]);
      }
    } finally {
      app.close();
    }
  });
});

describe("HEAD on the live routes", () => {
  const dir = tempDir("cairn-findings-head-");
  const waits = workflow({ name: "attack-head", version: "1" }, async (ctx) => {
    await ctx.waitForEvent("go");
  });
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [waits],
      pollIntervalMs: 10,
    });
    await engine.start(waits, undefined, { id: "h1" });
    await until(async () => (await engine.getRun("h1"))?.status === "waiting", "h1 waits");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("a HEAD request (a link checker, a monitor) leaves no stream behind reading the store", async () => {
    let reads = 0;
    const counted = new Set([
      "getRun",
      "getSteps",
      "listEvents",
      "listRuns",
      "listWorkers",
      "readStream",
    ]);
    const spy = new Proxy(engine, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (counted.has(String(prop))) reads++;
          return value.apply(target, args);
        };
      },
    });
    const app = createHttpApp({ engine: spy, pollIntervalMs: 10 });
    try {
      for (const path of [
        "/api/live/runs/h1/stream",
        "/api/live/runs/h1",
        "/api/live/runs?q=head",
        "/api/live/workers",
      ]) {
        const res = await app.fetch(new Request(`http://localhost${path}`, { method: "HEAD" }));
        expect([path, res.status]).toEqual([path, 200]);
        expect(res.body).toBeNull();
      }
      // Nobody can ever read those answers' streams: nothing may go on polling for them.
      await new Promise((r) => setTimeout(r, 200));
      const settled = reads;
      await new Promise((r) => setTimeout(r, 300));
      expect(reads - settled).toBe(0);
    } finally {
      app.close();
    }
  });
});

describe("cairn worker's text log", () => {
  it("prints one line per event, whatever the run id holds (no forged log line)", () => {
    const printed: string[] = [];
    const ctx = {
      env: {},
      cwd: "/",
      out: (t: string) => printed.push(t),
      err: (t: string) => printed.push(t),
    };
    const logger = workerLogger(ctx, "text");
    const fields = {
      event: "claimed" as const,
      workerId: "wrk_1",
      runId: 'x"\n12:00:00.000 completed run "deploy-prod" (deploy@1)',
      workflow: "attack",
      version: "1",
    };
    logger.info(fields, workerEventMessage(fields));
    logger.error(
      { err: new Error('first line\n12:00:00.000 completed run "deploy-prod"') },
      "store problem",
    );
    const lines = printed.flatMap((t) => t.split("\n"));
    expect(
      lines.filter((l) => l.includes('completed run "deploy-prod"') && l.startsWith("12:00")),
    ).toEqual([]);
    expect(lines).toHaveLength(2);
  });
});
