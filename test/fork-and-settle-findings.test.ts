// Found by an adversarial review of the replay, fork and settle changes of stop 24: forks of
// resumed runs keep the source's race winners, a failure rethrown from a replayed record can
// be fixed by resume, nothing parked starts once the function settled, approval links with a
// clock reading fractions; beside what held (waits of every kind, close() and crashes during
// the settle, checkReplay after it).

import { afterEach, describe, expect, it } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  type EngineOptions,
  FatalError,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { checkReplay, createVirtualClock } from "../src/testing/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { pgUrl, useHarness } from "./helpers/engines.js";
import { dropSchema } from "./helpers/postgres.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A store whose writes of drawn values (ctx.now/uuid) take `ms`: a slow disk, a far database. */
function slowValueWrites(inner: Store, ms: number): Store {
  return new Proxy(inner, {
    get(target, prop, recv) {
      if (prop === "appendRecords") {
        return async (writes: Parameters<Store["appendRecords"]>[0]) => {
          if (writes.some((w) => w.steps?.some((s) => s.key.startsWith("@now")))) await delay(ms);
          return target.appendRecords(writes);
        };
      }
      const v = Reflect.get(target, prop, recv);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

function harness(backend: "sqlite" | "postgres" = "sqlite") {
  let store: () => Store;
  if (backend === "postgres") {
    if (!pgUrl) throw new Error("no PostgreSQL");
    const url = pgUrl;
    const schema = `cairn_fork_settle_${Math.random().toString(36).slice(2, 10)}`;
    cleanups.push(() => dropSchema(url, schema));
    store = () => postgresStore(url, { schema });
  } else {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    store = () => sqliteStore(db.path);
  }
  return {
    store,
    engine(workflows: AnyWorkflow[], opts: Omit<EngineOptions, "workflows"> = {}): Engine {
      const e = createEngine({
        store: store(),
        workflows,
        pollIntervalMs: 10,
        replayStallMs: 3_000,
        ...opts,
      });
      cleanups.push(() => e.close());
      return e;
    },
  };
}

describe("settleInFlight", () => {
  it("a child call parked behind a drawn value's write when the function returns is not started", async () => {
    const h = harness();
    let childRuns = 0;
    const child = workflow({ name: "child", version: "1" }, async (ctx) => {
      await ctx.step("side-effect", () => ++childRuns);
      return "child";
    });
    const parent = workflow({ name: "parent", version: "1" }, async (ctx) => {
      const side = (async () => {
        ctx.now("t"); // written after this cascade (slow)
        await ctx.child("c", child, undefined); // waits for that write in beforeExecute
      })();
      side.catch(() => {});
      await delay(30); // work of the workflow's own; then it returns
      return "done";
    });
    const e = createEngine({
      store: slowValueWrites(sqliteStore(tempPath(h)), 200),
      workflows: [parent, child],
      pollIntervalMs: 10,
    });
    cleanups.push(() => e.close());
    const run = await e.start(parent, undefined);
    expect(await run.result()).toBe("done");
    await delay(500);
    // The function had returned: nothing new may start. Fails: the child run exists and ran.
    expect(await e.getRun(`${run.id}/c`)).toBeUndefined();
    expect(childRuns).toBe(0);
  });
});

function tempPath(_h: ReturnType<typeof harness>): string {
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  return db.path;
}

describe("replaced histories", () => {
  it("two resumes in a row (the second failure a replayed one), then a replay: same winners, nothing twice", async () => {
    const h = harness();
    let broken1 = true;
    let broken2 = true;
    const seen: string[] = [];
    const bodies: Record<string, number> = {};
    const count = (k: string) => {
      bodies[k] = (bodies[k] ?? 0) + 1;
    };
    const wf = workflow({ name: "two-resumes", version: "1" }, async (ctx) => {
      let f1: unknown;
      let f2: unknown;
      try {
        await ctx.step("x", () => {
          count("x");
          if (broken1) throw new FatalError("x broken");
          return "x";
        });
      } catch (e) {
        f1 = e;
      }
      const y = await ctx.step("y", () => {
        count("y");
        return "y";
      });
      try {
        await ctx.step("w", () => {
          count("w");
          if (broken2) throw new FatalError("w broken");
          return "w";
        });
      } catch (e) {
        f2 = e;
      }
      const slow = ctx.step("slow", async () => {
        count("slow");
        await delay(40);
        return "slow";
      });
      const fast = ctx.step("fast", () => {
        count("fast");
        return "fast";
      });
      const winner = await Promise.race([slow, fast]);
      const u = ctx.uuid("after-race");
      seen.push(`${winner}:${u}`);
      await ctx.step("act", () => {
        count("act");
        return winner;
      });
      await Promise.all([slow, fast]);
      if (f1) throw f1;
      if (f2) throw f2;
      await ctx.waitForEvent("go");
      return `${y}:${winner}:${u}`;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow("x broken");
    broken1 = false;
    await e.resume(run.id);
    await expect(run.result()).rejects.toThrow("w broken");
    broken2 = false;
    await e.resume(run.id);
    await until(async () => {
      const st = (await e.getRun(run.id))?.status;
      return st === "waiting" || st === "failed" || st === "completed";
    }, "the run waits");
    const r2 = await e.getRun(run.id);
    expect.soft(r2?.status, JSON.stringify({ r2, seen, bodies })).toBe("waiting");
    await e.sendEvent(run.id, "go");
    const out = await run.result();
    expect(new Set(seen).size).toBe(1);
    expect(out.endsWith(seen[0]!.split(":")[1]!)).toBe(true);
    expect(bodies).toEqual({ x: 2, y: 1, w: 2, slow: 1, fast: 1, act: 1 });
    const fork = await e.fork(run.id, { fromStep: "act" });
    await until(async () => (await e.getRun(fork.id))?.status === "waiting", "the fork waits");
    await e.sendEvent(fork.id, "go");
    await fork.result();
  });
});

describe("checkReplay after a settle", () => {
  it("a completed race whose loser was aborted, and a failed run whose sibling finished in the grace, check ok", async () => {
    const h = harness();
    const race = workflow({ name: "race", version: "1" }, async (ctx) =>
      Promise.race([
        ctx.step("fast", () => "fast"),
        ctx.step("slow", async (s) => {
          await delay(50);
          s.spend({ usd: 1 });
          return "slow";
        }),
      ]),
    );
    const sib = workflow({ name: "sib", version: "1" }, async (ctx) => {
      await Promise.all([
        ctx.step("llm", async () => {
          await delay(30);
          return "a";
        }),
        ctx.step("check", () => {
          throw new FatalError("check failed");
        }),
      ]);
    });
    const e = h.engine([race, sib], { abortGraceMs: 300 });
    const r1 = await e.start(race, undefined);
    expect(await r1.result()).toBe("fast");
    const r2 = await e.start(sib, undefined);
    await expect(r2.result()).rejects.toThrow("check failed");
    await e.close();
    const res = await checkReplay({ store: h.store(), workflows: [race, sib] });
    expect(res.map((r) => [r.runId, r.verdict, r.detail])).toEqual([
      [expect.any(String), "ok", expect.anything()],
      [expect.any(String), "ok", expect.anything()],
    ]);
  });
});

describe("fork of a resumed run", () => {
  it.each(pgUrl ? (["sqlite", "postgres"] as const) : (["sqlite"] as const))(
    "%s: a race between a replaced-history record and a new one keeps the source's winner in a fork",
    async (backend) => {
      const h = harness(backend);
      let broken = true;
      const seen: string[] = [];
      const wf = workflow({ name: "fork-race", version: "1" }, async (ctx) => {
        let failure: unknown;
        try {
          await ctx.step("x", () => {
            if (broken) throw new FatalError("x is broken");
            return "x";
          });
        } catch (e) {
          failure = e;
        }
        const f = ctx.step("f", async () => {
          await delay(20);
          return "f";
        }); // recorded after x's failure: replaced history once resumed
        if (failure) {
          await f;
          throw failure;
        }
        const l = ctx.step("l", () => "l"); // new in the resumed generation
        const winner = await Promise.race([f.then(() => "f"), l.then(() => "l")]);
        seen.push(winner);
        const acted = await ctx.step("act", () => `acted on ${winner}`);
        await Promise.all([f, l]);
        const z = await ctx.step("z", () => "z");
        return { winner, acted, z };
      });
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined);
      await expect(run.result()).rejects.toThrow("x is broken");
      broken = false;
      await e.resume(run.id);
      const out = await run.result();
      expect(out.acted).toBe(`acted on ${out.winner}`);
      const fork = await e.fork(run.id, { fromStep: "z" });
      const forked = await fork.result();
      // The fork replays everything before z as the source had it.
      expect.soft(seen).toEqual([out.winner, out.winner]);
      expect(forked).toEqual(out);
    },
  );
});

describe("fork of a resumed run, failed and resumed itself", () => {
  it("the fork's race keeps the source's winner across its own failure and resume", async () => {
    const h = harness();
    let broken = true;
    let zBroken = false;
    const seen: string[] = [];
    const wf = workflow({ name: "fork-resume", version: "1" }, async (ctx) => {
      let failure: unknown;
      try {
        await ctx.step("x", () => {
          if (broken) throw new FatalError("x is broken");
          return "x";
        });
      } catch (e) {
        failure = e;
      }
      const f = ctx.step("f", async () => {
        await delay(20);
        return "f";
      });
      if (failure) {
        await f;
        throw failure;
      }
      const l = ctx.step("l", () => "l");
      const winner = await Promise.race([f.then(() => "f"), l.then(() => "l")]);
      seen.push(winner);
      const acted = await ctx.step("act", () => `acted on ${winner}`);
      await Promise.all([f, l]);
      const z = await ctx.step("z", () => {
        if (zBroken) throw new FatalError("z is broken");
        return "z";
      });
      await ctx.waitForEvent("go");
      return { winner, acted, z };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow("x is broken");
    broken = false;
    await e.resume(run.id);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go");
    const out = await run.result();
    zBroken = true;
    const fork = await e.fork(run.id, { fromStep: "z" });
    await expect(fork.result()).rejects.toThrow("z is broken");
    zBroken = false;
    await e.resume(fork.id);
    await until(async () => (await e.getRun(fork.id))?.status === "waiting", "the fork waits");
    await e.sendEvent(fork.id, "go");
    expect(await fork.result()).toEqual(out);
    expect(new Set(seen)).toEqual(new Set([out.winner]));
  });
});

describe("approval links", () => {
  it("a link answers its own run when the clock reads fractional milliseconds", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const clock = createVirtualClock(Date.UTC(2026, 0, 1) + 0.5);
    const keys = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];
    const wf = workflow({ name: "link", version: "1" }, async (ctx) => {
      const a = await ctx.approval("go", { request: "ok?" });
      return a.approved;
    });
    const e = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      approvalKeys: keys,
    });
    cleanups.push(() => e.close());
    const run = await e.start(wf, undefined, { id: "frac" });
    await until(async () => (await e.getRun("frac"))?.status === "waiting", "waits");
    const links = await e.approvalLinks("frac", "go", { baseUrl: "https://x.example" });
    const token = links.approve.slice(links.approve.lastIndexOf("/") + 1);
    await e.answerApprovalLink(token);
    expect(await run.result()).toBe(true);
  });
});

describe("a failed function with branches in every kind of wait", () => {
  it("ends failed within the grace, runs nothing new, keeps the finished step", async () => {
    const h = harness();
    const ran: string[] = [];
    const child = workflow({ name: "sleepy-child", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1h");
      return 1;
    });
    const wf = workflow({ name: "many-waits", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("w");
      const branches = [
        ctx.sleep("s", "1h"),
        ctx.waitForEvent("e"),
        ctx.child("c", child, undefined),
        ctx.approval("a", { request: "?" }),
        ws.step("ws-step", async () => {
          await delay(100);
          ran.push("ws-step");
          return 1;
        }),
        ctx.step(
          "retrying",
          () => {
            ran.push("retrying");
            throw new Error("flaky");
          },
          { retry: { maxAttempts: 5, initialDelay: 20 } },
        ),
        ctx.step("budget", () => ran.push("budget"), { estimate: { usd: 100 } }),
        ctx.step("boom", async () => {
          await delay(20);
          throw new FatalError("boom");
        }),
      ];
      for (const b of branches) Promise.resolve(b).catch(() => {});
      await Promise.all(branches);
    });
    const e = h.engine([wf, child], { abortGraceMs: 300 });
    const run = await e.start(wf, undefined, { budget: { usd: 10 } });
    const t0 = Date.now();
    await expect(run.result()).rejects.toThrow("boom");
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect((await e.getRun(run.id))?.status).toBe("failed");
    await delay(300);
    expect(ran.filter((r) => r === "budget")).toEqual([]);
    expect(ran.filter((r) => r === "ws-step")).toEqual(["ws-step"]);
    // No retry after the function failed (its backoff was cut short).
    const retries = ran.filter((r) => r === "retrying").length;
    await delay(200);
    expect(ran.filter((r) => r === "retrying").length).toBe(retries);
  });
});

describe("close() while a failed run gives its sibling the grace", () => {
  it("the run ends failed with the sibling recorded; a resume does not run it again", async () => {
    const h = harness();
    let broken = true;
    let llmCalls = 0;
    let llmDone = 0;
    const wf = workflow({ name: "close-grace", version: "1" }, async (ctx) => {
      const [answer] = await Promise.all([
        ctx.step("llm", async (s) => {
          llmCalls++;
          await delay(300);
          s.spend({ usd: 1 });
          llmDone++;
          return "answer";
        }),
        ctx.step("check", () => {
          if (broken) throw new FatalError("check failed");
          return "ok";
        }),
      ]);
      return answer;
    });
    const e = h.engine([wf], { abortGraceMs: 2_000 });
    const run = await e.start(wf, undefined);
    await until(async () => llmCalls === 1, "llm starts");
    await delay(50); // check has failed the function; llm is in its grace
    await e.close();
    const e2 = h.engine([wf], { abortGraceMs: 2_000 });
    const st = await e2.getRun(run.id);
    expect.soft(st?.status).toBe("failed");
    broken = false;
    if (st?.status === "failed") await e2.resume(run.id);
    expect(await e2.handle(run.id).result()).toBe("answer");
    expect(llmDone).toBe(1);
    expect(llmCalls).toBe(1);
  });
});

describe("a crash during the settle", () => {
  const harnessV = useHarness("sqlite");
  it("failed: the recovery ends the run as the function did (same error), then resume completes", async () => {
    const h = harnessV();
    let broken = true;
    let llmStarted = 0;
    const wf = workflow({ name: "crash-failed", version: "1" }, async (ctx) => {
      const [a] = await Promise.all([
        ctx.step("llm", async () => {
          llmStarted++;
          await delay(llmStarted === 1 ? 60_000 : 10);
          return "answer";
        }),
        ctx.step("check", () => {
          if (broken) throw new FatalError("check failed");
          return "ok";
        }),
      ]);
      return a;
    });
    const first = crashableEngine(h, [wf], { abortGraceMs: 30_000 });
    const run = await first.engine.start(wf, undefined);
    await until(() => llmStarted === 1, "llm runs");
    await delay(100); // check failed the function; llm is in its grace
    first.crash();
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    await expect(second.handle(run.id).result()).rejects.toThrow("check failed");
    broken = false;
    await second.resume(run.id);
    expect(await second.handle(run.id).result()).toBe("answer");
  });
  it("completed: the recovery returns what the function returned", async () => {
    const h = harnessV();
    let slowStarted = 0;
    const wf = workflow({ name: "crash-completed", version: "1" }, async (ctx) =>
      Promise.race([
        ctx.step("fast", () => "fast"),
        ctx.step("slow", async () => {
          slowStarted++;
          await delay(60_000);
          return "slow";
        }),
      ]),
    );
    const first = crashableEngine(h, [wf], { abortGraceMs: 30_000 });
    const run = await first.engine.start(wf, undefined);
    await until(() => slowStarted === 1, "slow runs");
    await delay(100);
    first.crash();
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    expect(await second.handle(run.id).result()).toBe("fast");
  });
});
