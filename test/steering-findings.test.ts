// Found by an adversarial audit of steering runs with many engines on one store (approvals,
// links, cancel, resume, retention, key rotation, clocks, leases), each a regression test
// of a bug it found, beside the races it tried that held (one winner each).

import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  type EngineOptions,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { createVirtualClock, type FaultPlan, type VirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";
import { tempDbPath, until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

type Backend = "sqlite" | "postgres";
const BACKENDS: Backend[] = pgUrl ? ["sqlite", "postgres"] : ["sqlite"];

interface H {
  clock: VirtualClock;
  store(): Store;
  engine(workflows: AnyWorkflow[], opts?: EngineOptions): Engine;
}

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function harness(backend: Backend): H {
  const clock = createVirtualClock();
  let store: () => Store;
  if (backend === "sqlite") {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    store = () => sqliteStore(db.path);
  } else {
    // An empty migrated schema an earlier test of this file used (helpers/postgres-reuse.ts).
    const reused = reusableSchema(pgUrl!, "cairn_steering");
    cleanups.push(reused.release);
    store = () => postgresStore(reused.url, { schema: reused.schema });
  }
  return {
    clock,
    store,
    engine(workflows, opts = {}) {
      const e = createEngine({ store: store(), workflows, clock, pollIntervalMs: 10, ...opts });
      cleanups.push(() => e.close());
      return e;
    },
  };
}

describe.each(BACKENDS)("%s", (backend) => {
  it("resume of a run failed by an approval's refused answer can be answered again", async () => {
    const h = harness(backend);
    const wf = workflow({ name: "pick", version: "1" }, async (ctx) => {
      const a = await ctx.approval("pick", {
        request: "pick a or b",
        schema: { answer: z.object({ choice: z.enum(["a", "b"]) }) },
      });
      return a.answer;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "ap1" });
    await until(async () => (await e.getRun("ap1"))?.status === "waiting", "ap1 waits");
    await e.approve("ap1", "pick", { by: "u", answer: { choice: "c" } });
    await expect(within(run.result(), 20_000, "ap1 fails")).rejects.toThrow(/invalid/);
    // The operator resumes the failed run: the approval is asked again.
    await e.resume("ap1");
    await until(async () => (await e.getRun("ap1"))?.status === "waiting", "ap1 waits again");
    const approvals = await e.listApprovals("ap1");
    // The run waits for an answer: the approval it waits for must be answerable.
    const answered = await e.approve("ap1", "pick", { by: "u", answer: { choice: "a" } }).then(
      () => "answered",
      (err: Error) => `refused: ${err.message}`,
    );
    expect({ answered, approvals: approvals.map((a) => a.status) }).toEqual({
      answered: "answered",
      approvals: ["pending"],
    });
    expect(await within(run.result(), 20_000, "ap1 completes")).toEqual({ choice: "a" });
  });
});

describe("durations past 2^31 ms", () => {
  it('abortGraceMs of "30d" gives a timed-out attempt its grace to report spend (not 1 ms)', async () => {
    const h = harness("sqlite");
    const wf = workflow({ name: "slow-stop", version: "1" }, async (ctx) => {
      try {
        await ctx.step(
          "work",
          async (s) =>
            new Promise((_, reject) => {
              s.signal.addEventListener("abort", () => {
                // Stops 50 ms of real time after the abort, reporting what it spent.
                setTimeout(() => {
                  s.spend({ usd: 1 });
                  reject(new Error("stopped"));
                }, 50);
              });
            }),
          { timeout: "1s", retry: { maxAttempts: 1 } },
        );
      } catch {}
      return "done";
    });
    const e = h.engine([wf], { abortGraceMs: 30 * 86_400_000 });
    const run = await e.start(wf, undefined, { id: "g1" });
    for (let i = 0; i < 50 && (await e.getRun("g1"))?.status !== "completed"; i++) {
      await h.clock.advance(500);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await within(run.result(), 20_000, "g1")).toBe("done");
    const [step] = await e.getSteps("g1");
    expect(step?.attempts[0]?.spend).toEqual({ usd: 1 });
    expect((await e.getRun("g1"))?.budget.spent).toEqual({ usd: 1 });
  });
});

describe("Date edge cases", () => {
  it("a RateLimitError whose retryAfter is an invalid Date: retried, or an error that names retryAfter", async () => {
    const h = harness("sqlite");
    const { RateLimitError } = await import("../src/index.js");
    let calls = 0;
    const wf = workflow({ name: "rl", version: "1" }, async (ctx) =>
      ctx.step(
        "call",
        () => {
          calls++;
          // e.g. new Date(response.headers.get("retry-after")) of a header in seconds
          if (calls === 1) throw new RateLimitError("slow down", { retryAfter: new Date("x") });
          return "ok";
        },
        { retry: { maxAttempts: 3, initialDelay: 10, jitter: false } },
      ),
    );
    const e = h.engine([wf]);
    await e.start(wf, undefined, { id: "rl1" });
    for (let i = 0; i < 40; i++) {
      const r = await e.getRun("rl1");
      if (r && ["completed", "failed"].includes(r.status)) break;
      await h.clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 20));
    }
    const r = await e.getRun("rl1");
    if (r?.status === "completed") expect(calls).toBe(2);
    else expect(r?.error?.message).toMatch(/retryAfter/);
  });
});

describe.each(BACKENDS)("%s: two engines racing", (backend) => {
  it("approve vs reject, sendEvent with one key, start of one id: one winner each", async () => {
    const h = harness(backend);
    const asks = workflow({ name: "asks", version: "1" }, async (ctx) => {
      const a = await ctx.approval("go", { request: "go?" });
      const ev = await ctx.waitForEvent<number>("num");
      return { approved: a.approved, by: a.by, num: ev.timedOut ? null : ev.payload };
    });
    const w = h.engine([asks]);
    const c1 = h.engine([], { worker: false });
    const c2 = h.engine([], { worker: false });
    const N = 8;
    for (let i = 0; i < N; i++) await w.start(asks, undefined, { id: `r${i}` });
    await until(
      async () => (await w.listRuns({ status: ["waiting"] })).length === N,
      "all wait for approval",
    );
    for (let i = 0; i < N; i++) {
      const res = await Promise.allSettled([
        c1.approve(`r${i}`, "go", { by: "alice" }),
        c2.reject(`r${i}`, "go", { by: "bob" }),
      ]);
      expect(res.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      const ev = await Promise.all([
        c1.sendEvent(`r${i}`, "num", 1, { idempotencyKey: "k" }),
        c2.sendEvent(`r${i}`, "num", 1, { idempotencyKey: "k" }),
      ]);
      expect(ev.map((x) => x.duplicate).sort()).toEqual([false, true]);
    }
    for (let i = 0; i < N; i++) {
      const out = (await within(w.handle(`r${i}`).result(), 20_000, `r${i}`)) as {
        approved: boolean;
        by: string;
      };
      const [appr] = await w.listApprovals(`r${i}`);
      expect(out.by).toBe(appr?.answeredBy);
      expect((await w.listEvents(`r${i}`)).filter((e) => e.name === "num")).toHaveLength(1);
    }
    // start of one id from two engines: one creates; same input: the other finds it;
    // another input: RunConflictError.
    for (let i = 0; i < N; i++) {
      const same = await Promise.all([
        c1.start("asks@1", { n: i }, { id: `s${i}` }),
        c2.start("asks@1", { n: i }, { id: `s${i}` }),
      ]);
      expect(same.map((r) => r.created).sort()).toEqual([false, true]);
      const diff = await Promise.allSettled([
        c1.start("asks@1", { n: 1 }, { id: `d${i}` }),
        c2.start("asks@1", { n: 2 }, { id: `d${i}` }),
      ]);
      expect(diff.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      const rej = diff.find((r) => r.status === "rejected") as PromiseRejectedResult;
      expect((rej.reason as Error).name).toBe("RunConflictError");
    }
  });
});

describe.each(BACKENDS)("%s: a cancel that lost the race to a failure", (backend) => {
  it("resume of the failed run runs it again; the stale cancel request does not cancel it", async () => {
    const h = harness(backend);
    const { FatalError } = await import("../src/index.js");
    let attempts = 0;
    const wf = workflow({ name: "fails-once", version: "1" }, async (ctx) =>
      ctx.step(
        "s",
        () => {
          attempts++;
          if (attempts === 1) throw new FatalError("boom");
          return "second time lucky";
        },
        { retry: { maxAttempts: 1 } },
      ),
    );
    // The worker's release of the failure is held until a cancel has been requested.
    let openGate!: () => void;
    const gate = new Promise<void>((r) => {
      openGate = r;
    });
    let releasing = false;
    const inner = h.store();
    const store = new Proxy(inner, {
      get(t, prop, recv) {
        const v = Reflect.get(t, prop, recv);
        if (prop === "releaseRun") {
          return async (r: { status: string }) => {
            if (r.status === "failed" && !releasing) {
              releasing = true;
              await gate;
            }
            return (v as (x: unknown) => unknown).call(t, r);
          };
        }
        return typeof v === "function" ? v.bind(t) : v;
      },
    });
    const w = createEngine({ store, workflows: [wf], clock: h.clock, pollIntervalMs: 10 });
    cleanups.push(() => w.close());
    const client = h.engine([], { worker: false });
    const run = await w.start(wf, undefined, { id: "cf1" });
    await until(() => releasing, "the failure's release is on its way");
    await client.cancel("cf1", "changed my mind");
    openGate();
    await expect(within(run.result(), 20_000, "cf1 fails")).rejects.toThrow(/boom/);
    expect((await client.getRun("cf1"))?.status).toBe("failed");
    await client.resume("cf1");
    const out = await within(w.handle("cf1").result(), 20_000, "cf1 resumed").catch(
      (e: Error) => `${e.name}: ${e.message}`,
    );
    expect(out).toBe("second time lucky");
  });
});

describe.each(BACKENDS)("%s: approval links after retention", (backend) => {
  it("an unused link of a deleted run's approval does not answer the approval of a new run under the same id", async () => {
    const h = harness(backend);
    const keys = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];
    const deploy = workflow({ name: "deploy", version: "1" }, async (ctx, build: string) => {
      const a = await ctx.approval("go", { request: { deploy: build } });
      return { build, approved: a.approved, via: a.via };
    });
    const e = h.engine([deploy], { approvalKeys: keys });
    const first = await e.start(deploy, "build-1", { id: "deploy-prod" });
    await until(async () => (await e.getRun("deploy-prod"))?.status === "waiting", "first waits");
    // Links go to two approvers; one of them rejects on the dashboard instead.
    const links = await e.approvalLinks("deploy-prod", "go", {
      baseUrl: "https://ops.example.com",
    });
    await e.reject("deploy-prod", "go", { by: "carol" });
    expect(await within(first.result(), 20_000, "first")).toMatchObject({ approved: false });
    // Retention deletes the run; the id is used again for the next deploy.
    await h.clock.advance(60_000);
    expect((await e.gc({ olderThan: "1s" })).runs).toBe(1);
    const second = await e.start(deploy, "build-2-untested", { id: "deploy-prod" });
    expect(second.created).toBe(true);
    await until(async () => (await e.getRun("deploy-prod"))?.status === "waiting", "second waits");
    // The old approve link, never used, was issued for build-1's request.
    const token = links.approve.slice(links.approve.lastIndexOf("/") + 1);
    const used = await e.answerApprovalLink(token).then(
      () => "answered",
      (err: Error) => err.name,
    );
    expect(used).not.toBe("answered");
    expect((await e.listApprovals("deploy-prod"))[0]?.status).toBe("pending");
  });
});

describe.each(BACKENDS)("%s: children outliving a parent that retention deleted", (backend) => {
  it("a new run under the parent's id starts its own child, not the deleted parent's", async () => {
    const h = harness(backend);
    const kid = workflow({ name: "kid", version: "1" }, async (ctx, topic: string) => {
      const ev = await ctx.waitForEvent<string>("answer");
      return `${topic}: ${ev.timedOut ? "-" : ev.payload}`;
    });
    const parent = workflow({ name: "asker", version: "1" }, async (ctx, topic: string) => {
      const c = ctx.child("ask", kid, topic);
      c.catch(() => {});
      const winner = await Promise.race([
        c.then((v) => ({ v })),
        ctx.sleep("deadline", "1h").then(() => ({ v: "gave up" })),
      ]);
      return winner.v;
    });
    const e = h.engine([parent, kid]);
    const first = await e.start(parent, "monday", { id: "daily" });
    await until(async () => (await e.getRun("daily/ask"))?.status === "waiting", "child waits");
    await h.clock.advance(3_600_000);
    expect(await within(first.result(), 20_000, "first parent")).toBe("gave up");
    // Retention: the parent finished long ago; its child still waits.
    await h.clock.advance(60_000);
    const collected = (await e.gc({ olderThan: "1s" })).runs;
    expect((await e.getRun("daily/ask"))?.status).toBe("waiting");
    // The id is used again, as documented: a new run if the parent was deleted; if it was
    // kept (with its live child), start's idempotency refuses another input.
    const second = await e.start(parent, "tuesday", { id: "daily" }).catch((err: Error) => err);
    if (second instanceof Error) {
      expect({ name: second.name, collected }).toEqual({ name: "RunConflictError", collected: 0 });
      return;
    }
    expect(second.created).toBe(true);
    await until(
      async () => ["waiting", "failed"].includes((await e.getRun("daily"))?.status ?? ""),
      "second parent settles",
    );
    const run = await e.getRun("daily");
    expect({ status: run?.status, error: run?.error?.message }).toEqual({
      status: "waiting",
      error: undefined,
    });
  });
});

describe.each(BACKENDS)("%s: one engine, one id, one turn", (backend) => {
  it("two starts of one id in the same turn: one run, executed once", async () => {
    const h = harness(backend);
    let executions = 0;
    const wf = workflow({ name: "once", version: "1" }, async (ctx, n: number) =>
      ctx.step("work", () => {
        executions++;
        return n;
      }),
    );
    const e = h.engine([wf]);
    const same = await Promise.all([
      e.start(wf, 1, { id: "x" }),
      e.start(wf, 1, { id: "x" }),
      e.start(wf, 1, { id: "x" }),
    ]);
    expect(same.map((r) => r.created).sort()).toEqual([false, false, true]);
    const diff = await Promise.allSettled([
      e.start(wf, 1, { id: "y" }),
      e.start(wf, 2, { id: "y" }),
    ]);
    expect(diff.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
    expect(await within(e.handle("x").result(), 20_000, "x")).toBe(1);
    await within(e.handle("y").result(), 20_000, "y");
    await new Promise((r) => setTimeout(r, 100));
    expect(executions).toBe(2);
    // An execution ends just after its release commits: wait for that, not a fixed time.
    await until(() => e.metrics().activeExecutions === 0, "no execution left");
  });
});

describe("workers with different leases on one host (containers, host networking)", () => {
  it("a worker with a short lease does not take a live long-lease worker's run: the step runs once", async () => {
    const h = harness("sqlite");
    let started = 0;
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const wf = workflow({ name: "charge", version: "1" }, async (ctx) =>
      ctx.step("charge-card", async () => {
        started++;
        await held;
        return "charged";
      }),
    );
    // X runs in another container on this host (another PID namespace), with --lease 10m:
    // it heartbeats every 200 s, and its lease on the run is good for 10 minutes.
    const inner = h.store();
    const xStore = new Proxy(inner, {
      get(t, prop, recv) {
        const v = Reflect.get(t, prop, recv);
        if (prop === "registerWorker") {
          return (w: Parameters<Store["registerWorker"]>[0]) =>
            inner.registerWorker({ ...w, pidNamespace: "container-x" });
        }
        return typeof v === "function" ? v.bind(t) : v;
      },
    });
    const opts = { pollIntervalMs: 20, closeGraceMs: 100 };
    const x = createEngine({ store: xStore, workflows: [wf], leaseMs: 600_000, ...opts });
    cleanups.push(() => x.close());
    await x.start(wf, undefined, { id: "pay-1" });
    await until(() => started === 1, "X runs the step");
    const xOwner = (await x.getRun("pay-1"))?.leaseOwner;
    // Y, with --lease 0.5s, on the same host and store (real clocks, both); it judges X by
    // X's lease, through three of its own leases (a sweep every heartbeat, ~170 ms).
    const y = createEngine({ store: h.store(), workflows: [wf], leaseMs: 500, ...opts });
    cleanups.push(() => y.close());
    cleanups.push(() => release());
    await new Promise((r) => setTimeout(r, 1_500));
    expect({ started, owner: (await y.getRun("pay-1"))?.leaseOwner }).toEqual({
      started: 1,
      owner: xOwner,
    });
  }, 30_000);
});

describe.each(BACKENDS)("%s: key rotation, a cancel from a process with the new key", (backend) => {
  it("a worker without the canceler's key still stops the run (or pauses it naming the key), and keeps its other runs", async () => {
    const h = harness(backend);
    const { encryptedStore } = await import("../src/index.js");
    const { randomBytes } = await import("node:crypto");
    const k1 = { id: "k1", key: randomBytes(32).toString("base64") };
    const k2 = { id: "k2", key: randomBytes(32).toString("base64") };
    const bodies: number[] = [];
    const wf = workflow({ name: "long", version: "1" }, async (ctx, n: number) =>
      ctx.step("work", (s) => {
        bodies.push(n);
        return new Promise((resolve, reject) => {
          s.signal.addEventListener("abort", () => reject(s.signal.reason));
          if (n < 0) resolve(n);
        });
      }),
    );
    // The worker is not yet deployed with k2; the operator's CLI already encrypts with it.
    const w = h.engine([wf], {
      store: encryptedStore(h.store(), { keys: [k1] }),
      leaseMs: 9_000,
      closeGraceMs: 100,
    });
    const cli = h.engine([], {
      store: encryptedStore(h.store(), { keys: [k2, k1] }),
      worker: false,
    });
    await w.start(wf, 1, { id: "a" });
    await w.start(wf, 2, { id: "b" });
    await until(async () => (await w.listRuns({ status: ["running"] })).length === 2, "both run");
    await cli.cancel("a", "wrong input");
    for (let i = 0; i < 20; i++) {
      await h.clock.advance(3_000);
      await new Promise((r) => setTimeout(r, 30));
    }
    const a = await cli.getRun("a");
    const b = await cli.getRun("b");
    expect({
      a: a?.status === "canceled" || (a?.status === "paused" && /k2/.test(String(a.reason))),
      // Run b, never canceled, keeps its one execution: its step body is not run again.
      bBodies: bodies.filter((n) => n === 2).length,
      b: b?.status,
      executing: w.metrics().activeExecutions,
    }).toEqual({ a: true, bBodies: 1, b: "running", executing: 1 });
  });
});

describe.runIf(pgUrl)("postgres: a worker whose clock runs ahead of the database's", () => {
  it("an approval the store accepted is never also timed out by the run", async () => {
    const h = harness("postgres");
    const { realClock } = await import("../src/index.js");
    // The worker's host clock is a minute ahead; leases and store times use the database's.
    const skewed = { system: true, now: () => Date.now() + 60_000, sleep: realClock.sleep };
    let releaseStep!: () => void;
    const stepHeld = new Promise<void>((r) => {
      releaseStep = r;
    });
    const wf = workflow({ name: "skew", version: "1" }, async (ctx) => {
      const [decision] = await Promise.all([
        ctx.approval("go", { request: "go?", timeout: "1s", onTimeout: "reject" }),
        // Keeps the run executing, so the approval's wait is timed in this process.
        ctx.step("busy", () => stepHeld),
      ]);
      return decision;
    });
    const w = createEngine({
      store: h.store(),
      workflows: [wf],
      clock: skewed,
      pollIntervalMs: 20,
    });
    cleanups.push(() => w.close());
    cleanups.push(() => releaseStep());
    // The client reads the system's clock too, so its store judges by the database's clock
    // (a virtual clock would be a store time of its own, frozen).
    const client = h.engine([], { worker: false, clock: realClock });
    const run = await w.start(wf, undefined, { id: "sk1" });
    await until(async () => (await client.listApprovals("sk1")).length === 1, "asked");
    // Past the approval's timeout (1 s) by the database's clock.
    await new Promise((r) => setTimeout(r, 1_500));
    const answer = await client.approve("sk1", "go", { by: "alice" }).then(
      (v) => v.status,
      (err: Error) => `refused: ${err.name}`,
    );
    releaseStep();
    const out = (await within(run.result(), 20_000, "sk1")) as {
      approved: boolean;
      timedOut: boolean;
    };
    // Either the answer was refused (the run timed out), or the run saw the answer.
    if (answer === "approved") expect(out).toMatchObject({ approved: true, timedOut: false });
    else expect(out).toMatchObject({ approved: false, timedOut: true });
  }, 30_000);
});

describe.each(BACKENDS)("%s: resume after retention took a failed child", (backend) => {
  it("resuming a parent whose failed child was deleted does not wait forever", async () => {
    const h = harness(backend);
    const { FatalError } = await import("../src/index.js");
    const kid = workflow({ name: "kid-fails", version: "1" }, async (ctx) =>
      ctx.step("x", () => {
        throw new FatalError("kid broke");
      }),
    );
    const parent = workflow({ name: "patient", version: "1" }, async (ctx) => {
      const c = ctx.child("kid", kid, undefined);
      c.catch(() => {});
      await ctx.sleep("later", "10d");
      return await c;
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "pp" });
    await until(async () => (await e.getRun("pp/kid"))?.status === "failed", "the child fails");
    // Retention (7 days) keeps the failed child while its parent sleeps (a resumed parent
    // may be about to read it), and takes it once the parent has failed.
    await h.clock.advance(8 * 86_400_000);
    await new Promise((r) => setTimeout(r, 50));
    expect((await e.gc({ olderThan: "7d" })).runs).toBe(0);
    await h.clock.advance(3 * 86_400_000);
    await expect(within(run.result(), 20_000, "pp fails")).rejects.toThrow(/kid broke/);
    expect((await e.gc({ olderThan: "7d" })).runs).toBe(1);
    expect(await e.getRun("pp/kid")).toBeUndefined();
    // The operator resumes the parent: it must end (fail again, or complete), not wait forever.
    await e.resume("pp");
    await new Promise((r) => setTimeout(r, 300));
    for (let i = 0; i < 5; i++) {
      await h.clock.advance(60_000);
      await new Promise((r) => setTimeout(r, 30));
    }
    const r = await e.getRun("pp");
    expect({ status: r?.status, waitingFor: r?.waitingFor }).toMatchObject({ status: "failed" });
  });
});

describe.each(BACKENDS)("%s: fencing across a deleted and restarted id", (backend) => {
  it("a write of a worker that lost its lease never lands in a new run under the same id (gc + start again)", async () => {
    const h = harness(backend);
    const performed: string[] = [];
    const job = workflow(
      { name: "job", version: "1" },
      async (ctx, input: { naps: number; amount: number }) => {
        for (let i = 0; i < input.naps; i++) await ctx.sleep("nap", "1m");
        return ctx.step("charge", () => {
          performed.push(`${ctx.runId}:${input.amount}`);
          return input.amount;
        });
      },
    );
    // Worker A: its write of "charge" is held in flight (a partition), and every other verb
    // stops answering, so its lease runs out.
    let openGate!: () => void;
    const gate = new Promise<void>((r) => {
      openGate = r;
    });
    let held = false;
    let lateOutcome: unknown;
    const { faultyStore, writesStep } = await import("../src/testing/index.js");
    const plan: FaultPlan = {
      beforeAppend: async (writes) => {
        if (!held && writesStep(writes, "charge")) {
          held = true;
          plan.stalled = new Set([
            "renewLeases",
            "releaseRun",
            "heartbeatWorker",
            "claimRuns",
            "getRun",
            "listRuns",
            "loadJournal",
            "pendingEvents",
            "pendingEventHeads",
            "eventPayloads",
          ]);
          await gate;
        }
      },
      afterAppend: (writes, outcomes) => {
        if (writesStep(writes, "charge")) lateOutcome = outcomes[0];
      },
    };
    const a = createEngine({
      store: faultyStore(h.store(), plan),
      workflows: [job],
      clock: h.clock,
      pollIntervalMs: 10,
      leaseMs: 10_000,
      closeGraceMs: 10,
    });
    await a.start(job, { naps: 0, amount: 100 }, { id: "order-1" });
    await until(() => held, "A's write of charge is in flight");

    // Worker B takes the run over once A's lease has expired, and completes it.
    const b = h.engine([job], { leaseMs: 10_000 });
    await h.clock.advance(11_000);
    expect(await within(b.handle("order-1").result(), 20_000, "B completes order-1")).toBe(100);
    // Retention deletes it; the id is started again (documented: a new run).
    await h.clock.advance(1_000);
    expect((await b.gc({ olderThan: 0 })).runs).toBe(1);
    const again = await b.start(job, { naps: 1, amount: 5 }, { id: "order-1" });
    expect(again.created).toBe(true);
    await until(async () => (await b.getRun("order-1"))?.status === "waiting", "order-1 sleeps");

    // A's write arrives now: it belongs to a run that no longer exists, and must be refused.
    openGate();
    await until(() => lateOutcome !== undefined, "A's late write is answered");
    const steps = (await b.getSteps("order-1")).map((s) => `${s.key}=${JSON.stringify(s.result)}`);
    // The new run is asleep in its "nap": it has no "charge" record, the old run's least of all.
    expect({ lateOutcome, steps }).toEqual({
      lateOutcome: { ok: false, reason: "lease-lost" },
      steps: ["nap=undefined"],
    });
  });
});

describe("liveness judged by the reader's lease, not the worker's", () => {
  it("start by name finds a live worker whose lease (and heartbeat interval) is longer than the starter's", async () => {
    // Scaled down from `cairn start fix-bug` (a client with the default 30 s lease) against
    // `cairn worker --lease 2m` (a heartbeat every 40 s): here 0.3 s against 30 s (every 10 s).
    const h = harness("sqlite");
    const wf = workflow({ name: "fix-bug", version: "3" }, async () => "ok");
    const w = createEngine({
      store: h.store(),
      workflows: [wf],
      leaseMs: 30_000,
      pollIntervalMs: 20,
    });
    cleanups.push(() => w.close());
    await w.listRuns(); // the worker is registered
    const starter = createEngine({ store: h.store(), worker: false, leaseMs: 300 });
    cleanups.push(() => starter.close());
    // Two of the starter's leases past the worker's heartbeat.
    await new Promise((r) => setTimeout(r, 600));
    const started = await starter.start("fix-bug", undefined).then(
      (r) => r.id,
      (err: Error) => err.name,
    );
    expect(started).not.toBe("UnknownWorkflowError");
  }, 20_000);
});

describe("a heartbeat slower than the lease", () => {
  it("heartbeatMs >= leaseMs is said at once: the leases would expire between renewals", async () => {
    const h = harness("sqlite");
    const wf = workflow({ name: "slow-hb", version: "1" }, async () => 1);
    const logged: string[] = [];
    const engine = createEngine({
      store: h.store(),
      workflows: [wf],
      leaseMs: 1_000,
      heartbeatMs: 5_000,
      log: (m) => logged.push(m),
    });
    cleanups.push(() => engine.close());
    expect(logged).toEqual([
      expect.stringMatching(
        /heartbeatMs \(5000\) is not below leaseMs \(1000\).*another worker may take its runs/,
      ),
    ]);
    // A client executes nothing: nothing to say.
    const client = createEngine({
      store: h.store(),
      worker: false,
      leaseMs: 1_000,
      heartbeatMs: 5_000,
      log: (m) => logged.push(m),
    });
    cleanups.push(() => client.close());
    expect(logged).toHaveLength(1);
  });
});

describe.each(BACKENDS)("%s: cancel racing completion from another engine", (backend) => {
  it("every run ends once, as its handle says; none is stuck", async () => {
    const h = harness(backend);
    const wf = workflow({ name: "quick", version: "1" }, async (ctx, n: number) => {
      const a = await ctx.step("a", () => n);
      await ctx.sleep("nap", 1);
      return ctx.step("b", () => a + 1);
    });
    const w = h.engine([wf]);
    const client = h.engine([], { worker: false });
    const N = 20;
    const runs = [];
    for (let i = 0; i < N; i++) runs.push(await w.start(wf, i, { id: `q${i}` }));
    const cancels = runs.map((r, i) =>
      new Promise((res) => setTimeout(res, i % 5)).then(() =>
        client.cancel(r.id, "race").then(
          () => "ok",
          (err: Error) => err.name,
        ),
      ),
    );
    for (let i = 0; i < 20; i++) {
      await h.clock.advance(10);
      await new Promise((r) => setTimeout(r, 5));
    }
    await Promise.all(cancels);
    for (const r of runs) {
      const out = await within(r.result(), 20_000, r.id).then(
        (v) => `completed:${v}`,
        (err: Error) => err.name,
      );
      const view = await client.getRun(r.id);
      if (view?.status === "completed") expect(out).toMatch(/^completed:/);
      else
        expect({ status: view?.status, out }).toEqual({
          status: "canceled",
          out: "RunCanceledError",
        });
    }
  });
});
