// Found by an audit of the HTTP API and the CLI; each test is a defect it found and failed
// before its fix:
// - a live stream whose client keeps the connection open but does not read made the
//   server queue every event for it, without bound;
// - logging out only deleted the cookie: a copied session cookie stayed valid as long as
//   the token, and the sign-in form could be tried without limit;
// - `cairn fork` printed a run id with a line break raw (a forged second line).

import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp, serveHttp } from "../src/http/index.js";
import { addressKey, LOGIN_FAILURES, LoginLimiter } from "../src/http/login-limit.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath, tempDir, until } from "./helpers/sqlite.js";

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
  return { engine, app };
}

interface Sse {
  id?: string;
  event: string;
  data: Record<string, unknown>;
}

/** Reads an event stream a message at a time, only when asked: between calls the client
 *  takes nothing, as a stalled browser tab or a hostile client would. */
function sseReader(res: Response) {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let done = false;
  const parse = (block: string): Sse | undefined => {
    const m: { id?: string; event?: string; data: string[] } = { data: [] };
    for (const line of block.split("\n")) {
      const colon = line.indexOf(":");
      if (colon <= 0) continue;
      const value = line.slice(colon + 1).replace(/^ /, "");
      const field = line.slice(0, colon);
      if (field === "data") m.data.push(value);
      else if (field === "event") m.event = value;
      else if (field === "id") m.id = value;
    }
    if (m.data.length === 0) return undefined;
    return {
      ...(m.id !== undefined ? { id: m.id } : {}),
      event: m.event ?? "message",
      data: JSON.parse(m.data.join("\n")),
    };
  };
  return {
    /** The next message; undefined once the stream has ended. */
    async next(): Promise<Sse | undefined> {
      for (;;) {
        const end = buffer.indexOf("\n\n");
        if (end >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const m = parse(block);
          if (m) return m;
          continue;
        }
        if (done) return undefined;
        const r = await reader.read();
        if (r.done) done = true;
        else buffer += decoder.decode(r.value, { stream: true });
      }
    },
    cancel: () => reader.cancel().catch(() => {}),
  };
}

describe("live streams: a client that keeps the stream open but does not read", () => {
  it("is cut off once its unsent backlog passes the limit, and a reconnect resumes with nothing lost", async () => {
    const { engine, app } = await setup({ pollIntervalMs: 20 });
    const open = (headers: Record<string, string> = {}) =>
      app.fetch(new Request("http://localhost/api/live/runs/run-1", { headers }));

    // The stalled client takes the snapshot, then nothing more.
    const stalled = sseReader(await open());
    cleanups.push(stalled.cancel);
    const snapshot = await stalled.next();
    expect(snapshot?.event).toBe("snapshot");

    // A client that reads, on the same watcher: what it receives, the stalled client was
    // handed too (one poll notifies both), so once it has every event the stalled one has
    // been sent them all.
    const reading = sseReader(await open());
    cleanups.push(reading.cancel);
    expect((await reading.next())?.event).toBe("snapshot");

    // 1 MiB per event, one event per poll (the reading client sees each before the next is
    // sent): 8 MiB in all, twice the backlog a stream may hold.
    const COUNT = 8;
    const payload = "x".repeat(1024 * 1024);
    for (let i = 0; i < COUNT; i++) {
      await engine.sendEvent("run-1", `e${i}`, { i, payload });
      for (;;) {
        const m = await reading.next();
        expect(m, `the reading client's stream ended at e${i}`).toBeDefined();
        if (m?.event === "run-event" && (m.data.event as { name: string }).name === `e${i}`) {
          break;
        }
      }
    }

    // The stalled client now reads what the server kept for it. Before the fix the stream
    // held all eight events (and stayed open); now it was cut off: it ends, and holds
    // fewer than all of them.
    const after: Sse[] = [];
    let ended = false;
    for (;;) {
      const m = await stalled.next();
      if (!m) {
        ended = true;
        break;
      }
      after.push(m);
      if (after.filter((e) => e.event === "run-event").length === COUNT) break;
    }
    expect(ended, "the stalled client's stream was not ended").toBe(true);
    expect(after.filter((e) => e.event === "run-event").length).toBeLessThan(COUNT);

    // EventSource reconnects with the last id it received: it gets what it missed (here, a
    // snapshot: it is too far behind for a replay), and nothing twice.
    const lastId = [snapshot!, ...after].filter((m) => m.id !== undefined).at(-1)!.id!;
    const again = sseReader(await open({ "last-event-id": lastId }));
    cleanups.push(again.cancel);
    const seen = after
      .filter((m) => m.event === "run-event")
      .map((m) => (m.data.event as { name: string }).name);
    const first = await again.next();
    if (!first) throw new Error("the reconnected stream ended at once");
    if (first.event === "snapshot") {
      const events = first.data.events as Array<{ name: string }>;
      seen.splice(0, seen.length, ...events.map((e) => e.name));
    } else {
      seen.push((first.data.event as { name: string }).name);
    }
    while (seen.length < COUNT) {
      const m = await again.next();
      // A replay past the backlog's limit would be cut off again, on every reconnect.
      expect(m, `the reconnected stream ended after ${seen.join(", ")}`).toBeDefined();
      if (m?.event === "run-event") seen.push((m.data.event as { name: string }).name);
    }
    expect(seen).toEqual(Array.from({ length: COUNT }, (_, i) => `e${i}`));
  }, 60_000);
});

const TOKEN = "full-token-0123456789";

/** POST /login as the sign-in form does. */
const loginForm = (token: string) =>
  new Request("http://localhost/login", {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", origin: "http://localhost" },
    body: new URLSearchParams({ token, next: "/runs/run-1" }).toString(),
  });

const sessionOf = (res: Response) => (res.headers.get("set-cookie") ?? "").split(";")[0]!;

describe("sign-in sessions", () => {
  it("logging out ends the session on the server: a copy of its cookie no longer signs in", async () => {
    const { app } = await setup({ token: TOKEN });
    const page = (cookie: string) =>
      app.fetch(new Request("http://localhost/runs/run-1", { headers: { cookie } }));

    const signedIn = await app.fetch(loginForm(TOKEN));
    expect(signedIn.status).toBe(303);
    const cookie = sessionOf(signedIn);
    expect(cookie).toMatch(/^cairn_session=./);
    // Someone copies the cookie (a shared machine, a proxy's log) ...
    const copy = cookie;
    expect((await page(copy)).status).toBe(200);
    // Another browser signs in with the same token.
    const other = sessionOf(await app.fetch(loginForm(TOKEN)));

    const out = await app.fetch(
      new Request("http://localhost/logout", {
        method: "POST",
        headers: { cookie, origin: "http://localhost" },
      }),
    );
    expect(out.status).toBe(303);
    expect(out.headers.get("set-cookie")).toMatch(/cairn_session=; Max-Age=0/);
    // Before the fix the cookie was derived from the token alone: the copy still worked.
    expect((await page(copy)).status).toBe(401);
    const api = await app.fetch(
      new Request("http://localhost/api/runs/run-1", { headers: { cookie: copy } }),
    );
    expect(api.status).toBe(401);
    // The other browser's session is its own, and goes on.
    expect(other).not.toBe(cookie);
    expect((await page(other)).status).toBe(200);
  });

  it("a session expires: the cookie's Max-Age is also the server's limit", async () => {
    const clock = createVirtualClock(Date.now());
    const { app } = await setup({ token: TOKEN, clock });
    const signedIn = await app.fetch(loginForm(TOKEN));
    const maxAge = Number(signedIn.headers.get("set-cookie")?.match(/Max-Age=(\d+)/)?.[1]);
    expect(maxAge).toBeGreaterThan(0);
    const cookie = sessionOf(signedIn);
    const page = () =>
      app.fetch(new Request("http://localhost/runs/run-1", { headers: { cookie } }));
    expect((await page()).status).toBe(200);
    await clock.advance(maxAge * 1000);
    expect((await page()).status).toBe(401);
  });
});

describe("sign-in: a limit on wrong tokens per client address", () => {
  it("refuses every sign-in from an address after repeated wrong tokens, until its window ends", async () => {
    const clock = createVirtualClock(Date.now());
    const { engine } = await setup();
    const server = await serveHttp({ engine, port: 0, token: TOKEN, clock });
    cleanups.push(() => server.close());
    const login = (token: string) =>
      fetch(`${server.url}/login`, {
        method: "POST",
        redirect: "manual",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token, next: "/" }).toString(),
      });

    for (let i = 0; i < LOGIN_FAILURES; i++) {
      const wrong = await login(`wrong-guess-${i}`);
      expect(wrong.status, `guess ${i}`).toBe(401);
    }
    // The right token too is refused now: otherwise a guesser would go on guessing.
    const limited = await login(TOKEN);
    expect(limited.status).toBe(429);
    expect(limited.headers.get("set-cookie")).toBeNull();
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(await limited.text()).toContain("Too many wrong tokens from this address");
    // A sign-in link (?token=) counts as signing in.
    const link = await fetch(`${server.url}/workers?token=${TOKEN}`, { redirect: "manual" });
    expect(link.status).toBe(429);
    expect(link.headers.get("set-cookie")).toBeNull();
    // A bearer token is not a sign-in: API clients go on.
    const api = await fetch(`${server.url}/api/runs`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(api.status).toBe(200);

    await clock.advance(Number(limited.headers.get("retry-after")) * 1000);
    const again = await login(TOKEN);
    expect(again.status).toBe(303);
    expect(again.headers.get("set-cookie")).toMatch(/^cairn_session=/);
  });

  it("remembers a bounded number of addresses, an IPv6 one by its /64", () => {
    const clock = createVirtualClock(Date.now());
    const limiter = new LoginLimiter(clock, 100);
    for (let i = 0; i < 10_000; i++) limiter.failed(`10.0.${i >> 8}.${i & 255}`);
    expect(limiter.size).toBe(100);
    expect(addressKey("2001:db8:1:2:aaaa::1")).toBe(addressKey("2001:db8:1:2:bbbb:cccc:dddd:eeee"));
    expect(addressKey("2001:db8:1:2::1")).not.toBe(addressKey("2001:db8:1:3::1"));
    expect(addressKey("::ffff:192.0.2.7")).toBe("192.0.2.7");
    expect(addressKey("::1")).toBe("0:0:0:0::/64");
  });
});

describe("cairn fork: the new run's id is text, printed on one line", () => {
  const dir = tempDir("cairn-fork-escape-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  const FORGED = "deploy-prod  deploy@1  completed  -";
  const done = workflow({ name: "done", version: "1" }, async (ctx) => {
    await ctx.step("plan", () => 1);
    return ctx.step("finish", () => 2);
  });
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [done], pollIntervalMs: 20 });
    await (await engine.start(done, undefined, { id: "src-1" })).result();
  }, 60_000);

  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("escapes a line break in the new id (and the step) instead of printing a second line", async () => {
    const forked = await cairn(["fork", "src-1", "--from", "finish", "--id", `f\n${FORGED}`], env);
    expect(forked.code, forked.stderr).toBe(0);
    const lines = forked.stdout.split("\n").filter((l) => l !== "");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`as "f\\n${FORGED}"`);
    expect(await engine.getRun(`f\n${FORGED}`)).toBeDefined();
  });
});
