// Adversarial review of sign-in sessions, the sign-in limit and live streams (22f8b55). Each
// test is a defect found and failed before its fix:
// - a successful sign-in with the read-only token cleared the address's wrong-token count,
//   so a read-token holder could guess at the full token without limit;
// - the limiter forgot the oldest address first, a locked one too: failures from enough
//   other addresses (one IPv6 /48 holds 65,536 /64s) unlocked it at once;
// - signing in again (the form, a ?token= link) left the browser's previous session alive:
//   a copy of that cookie outlived "Log out";
// - a read-token holder signing in 10,000 times ended every full-token session;
// - a browser with a valid session that followed a ?token= link while its address was
//   limited (a shared proxy, someone guessing) got a 429 instead of its page;
// - a page on another site could lock its visitors' address out of signing in with
//   images (or frames, fetch()) pointing at ?token= links with wrong tokens;
// - `cairn show` printed a cancel reason, an approval's comment and answerer, and the
//   `cairn resume <id>` advice with their line breaks raw (forged lines), and the commands
//   it and `cairn start` suggest did not quote the run id for the shell.

import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { explainRun } from "../src/cli/explain-run.js";
import { createHttpApp } from "../src/http/index.js";
import { LOGIN_FAILURES, LoginLimiter } from "../src/http/login-limit.js";
import { Sessions } from "../src/http/sessions.js";
import { createEngine, type Engine, type RunView, sqliteStore, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath, tempDir, until } from "./helpers/sqlite.js";

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

/** What node:http hands the app: the connection's peer address. */
const from = (address: string) => ({ incoming: { socket: { remoteAddress: address } } });

const loginForm = (token: string, cookie?: string) =>
  new Request("http://localhost/login", {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      origin: "http://localhost",
      ...(cookie ? { cookie } : {}),
    },
    body: new URLSearchParams({ token, next: "/" }).toString(),
  });

const sessionOf = (res: Response) => (res.headers.get("set-cookie") ?? "").split(";")[0]!;

describe("sign-in limit", () => {
  it("a read-only sign-in does not clear the count of wrong tokens (no endless guessing at the full token)", async () => {
    const { app } = await setup({ token: TOKEN, readToken: READ });
    const ip = from("203.0.113.9");
    // Nine wrong guesses at the full token, then a sign-in with the read-only token (which
    // its holder knows), three times over: 27 wrong tokens within the window.
    let answeredWrong = 0;
    let limited = false;
    for (let round = 0; round < 3 && !limited; round++) {
      for (let i = 0; i < LOGIN_FAILURES - 1; i++) {
        const r = await app.fetch(loginForm(`guess-${round}-${i}-xxxxxx`), ip);
        if (r.status === 429) {
          limited = true;
          break;
        }
        expect(r.status).toBe(401);
        answeredWrong++;
      }
      await app.fetch(loginForm(READ), ip);
    }
    // Before the fix each read-only sign-in cleared the count: no guess was ever refused.
    expect(limited).toBe(true);
    expect(answeredWrong).toBe(LOGIN_FAILURES);
    expect((await app.fetch(loginForm("guess-again-xxxxxx"), ip)).status).toBe(429);
  });

  it("a locked address stays locked however many other addresses fail", () => {
    const clock = createVirtualClock(Date.now());
    const limiter = new LoginLimiter(clock, 100);
    const attacker = "2001:db8:0:1::/64";
    for (let i = 0; i < LOGIN_FAILURES; i++) limiter.failed(attacker);
    expect(limiter.waitFor(attacker)).toBeGreaterThan(0);
    // One wrong token from each of 100 other /64s (all in the same /48).
    for (let i = 2; i < 102; i++) limiter.failed(`2001:db8:0:${i.toString(16)}::/64`);
    expect(limiter.size).toBeLessThanOrEqual(101);
    expect(limiter.waitFor(attacker)).toBeGreaterThan(0);
  });

  it("flooding the table does not buy unlimited guesses: clients beyond it share a limit", () => {
    const clock = createVirtualClock(Date.now());
    const limiter = new LoginLimiter(clock, 100);
    // 100 /64s each locked: the table is full of locked clients.
    for (let i = 0; i < 100; i++) {
      for (let k = 0; k < LOGIN_FAILURES; k++) limiter.failed(`10.0.0.${i}`);
    }
    // Newcomers guess: at most LOGIN_FAILURES more before they are limited as well.
    let guesses = 0;
    for (let i = 0; i < 1000; i++) {
      const c = `10.1.${i >> 8}.${i & 255}`;
      if (limiter.waitFor(c) > 0) break;
      limiter.failed(c);
      guesses++;
    }
    expect(guesses).toBeLessThanOrEqual(LOGIN_FAILURES);
    for (let i = 0; i < 100; i++) expect(limiter.waitFor(`10.0.0.${i}`)).toBeGreaterThan(0);
    expect(limiter.size).toBeLessThanOrEqual(101);
  });
});

describe("sign-in links and other sites", () => {
  it("an image or a fetch() from another site with ?token= does not spend its visitor's limit", async () => {
    const { app } = await setup({ token: TOKEN });
    const ip = from("192.0.2.33");
    // A page elsewhere, visited by the user, embeds wrong sign-in links: the user's browser
    // requests them from the user's address.
    for (let i = 0; i < LOGIN_FAILURES + 2; i++) {
      for (const dest of ["image", "empty", "iframe"]) {
        await app.fetch(
          new Request(`http://localhost/?token=wrong-${i}-xxxxxx`, {
            headers: { "sec-fetch-site": "cross-site", "sec-fetch-dest": dest },
          }),
          ip,
        );
      }
    }
    const signIn = await app.fetch(loginForm(TOKEN), ip);
    expect(signIn.status).toBe(303);
    // A link opened as a page still signs in.
    const link = await app.fetch(
      new Request(`http://localhost/workers?token=${TOKEN}`, {
        headers: { "sec-fetch-site": "cross-site", "sec-fetch-dest": "document" },
      }),
      ip,
    );
    expect(link.status).toBe(303);
    expect(link.headers.get("set-cookie")).toMatch(/^cairn_session=/);
  });
});

describe("sign-in links while the address is limited", () => {
  it("a browser already signed in follows a ?token= link to its page, not a 429", async () => {
    const { app } = await setup({ token: TOKEN });
    const ip = from("198.51.100.4");
    const cookie = sessionOf(await app.fetch(loginForm(TOKEN), ip));
    // Someone behind the same address (a shared proxy) guesses until it is limited.
    for (let i = 0; i < LOGIN_FAILURES; i++) await app.fetch(loginForm(`nope-${i}-xxxxxxx`), ip);
    expect((await app.fetch(loginForm(TOKEN), ip)).status).toBe(429);
    // The signed-in user opens a bookmarked sign-in link.
    const link = await app.fetch(
      new Request(`http://localhost/workers?token=${TOKEN}`, { headers: { cookie } }),
      ip,
    );
    expect(link.status).toBe(303);
    expect(link.headers.get("location")).toBe("/workers");
    expect(link.headers.get("set-cookie")).toBeNull();
    const page = await app.fetch(
      new Request("http://localhost/workers", { headers: { cookie } }),
      ip,
    );
    expect(page.status).toBe(200);
    // Without a session the link is still refused.
    const bare = await app.fetch(new Request(`http://localhost/workers?token=${TOKEN}`), ip);
    expect(bare.status).toBe(429);
  });
});

describe("sign-in sessions", () => {
  it("signing in again ends the browser's previous session: a copy of its cookie dies with the logout", async () => {
    const { app } = await setup({ token: TOKEN });
    const page = (cookie: string) =>
      app.fetch(new Request("http://localhost/runs/run-1", { headers: { cookie } }));
    const first = sessionOf(await app.fetch(loginForm(TOKEN)));
    expect((await page(first)).status).toBe(200);
    const copy = first; // copied from the shared machine
    // The same browser follows a sign-in link (its cookie goes along) ...
    const link = await app.fetch(
      new Request(`http://localhost/workers?token=${TOKEN}`, { headers: { cookie: first } }),
    );
    expect(link.status).toBe(303);
    const second = sessionOf(link);
    expect(second).not.toBe(first);
    // ... and logs out.
    const out = await app.fetch(
      new Request("http://localhost/logout", {
        method: "POST",
        headers: { cookie: second, origin: "http://localhost" },
      }),
    );
    expect(out.status).toBe(303);
    expect((await page(second)).status).toBe(401);
    // The copy of the first cookie must not outlive the logout.
    expect((await page(copy)).status).toBe(401);
  });

  it("the same for the sign-in form", async () => {
    const { app } = await setup({ token: TOKEN });
    const page = (cookie: string) =>
      app.fetch(new Request("http://localhost/runs/run-1", { headers: { cookie } }));
    const first = sessionOf(await app.fetch(loginForm(TOKEN)));
    const second = sessionOf(await app.fetch(loginForm(TOKEN, first)));
    expect(second).not.toBe(first);
    expect((await page(first)).status).toBe(401);
    expect((await page(second)).status).toBe(200);
  });

  it("a read-only token holder cannot end the full token's sessions by signing in many times", () => {
    const clock = createVirtualClock(Date.now());
    const sessions = new Sessions(clock, 100);
    const act = sessions.create("act");
    for (let i = 0; i < 1000; i++) sessions.create("read");
    expect(sessions.roleOf(act)).toBe("act");
    expect(sessions.size).toBeLessThanOrEqual(200);
  });
});

describe("cairn show and start: text from a run stays on its line, commands are shell words", () => {
  const dir = tempDir("cairn-output-escape-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  const FORGED = "  status      completed";
  const asks = workflow({ name: "asks", version: "1" }, async (ctx) => {
    const a = await ctx.approval("go", { request: "ok?" });
    await ctx.waitForEvent("more");
    return a.approved;
  });
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [asks, waits], pollIntervalMs: 20 });
    await engine.start(asks, undefined, { id: "asks-1" });
    await engine.start(waits, undefined, { id: "stop-1" });
    await until(async () => (await engine.getRun("asks-1"))?.status === "waiting", "asks");
    // The approver (anyone holding an approval link) writes a comment; someone with the
    // token cancels with a reason. Both are text from others, shown by `cairn show`.
    await engine.approve("asks-1", "go", { comment: `fine\n${FORGED}`, by: `ann\n${FORGED}` });
    await until(
      async () => (await engine.getRun("asks-1"))?.waitingFor?.includes("more") ?? false,
      "asks waits for more",
    );
    await until(async () => (await engine.getRun("stop-1"))?.status === "waiting", "stop waits");
    await engine.cancel("stop-1", `ops\n${FORGED}`);
  }, 60_000);

  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("a cancel reason with a line break is one line", async () => {
    const shown = await cairn(["show", "stop-1"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).not.toContain(`\n${FORGED}`);
  });

  it("an approval's comment and answerer with a line break are one line each", async () => {
    const shown = await cairn(["show", "asks-1"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).not.toContain(`\n${FORGED}`);
  });

  it("a budget-paused run's advice names the run as one shell word on one line", () => {
    const run = {
      id: "r 1\nrm -rf ~",
      workflow: "w",
      version: "1",
      status: "paused",
      pausedFor: "budget",
      reason: "budget: usd 5 of 5",
    } as unknown as RunView;
    const why = explainRun(run, [], new Date());
    expect(why).not.toContain("\n");
    expect(why).toContain("cairn resume $'r 1\\nrm -rf ~' --budget");
  });

  it("cairn start's follow-up command is a shell word", async () => {
    const started = await cairn(["start", "waits@1", "--id", "a b;c"], env);
    expect(started.code, started.stderr).toBe(0);
    expect(started.stdout).toContain("Follow it with: cairn show 'a b;c'");
  });
});
