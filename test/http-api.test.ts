// The HTTP API against a store with runs in every status, on SQLite and PostgreSQL:
// listing with every filter and paging, a run with its steps, attempts and events, every
// action (events idempotent on their key, cancel, resume with a raised budget, fork from a
// failed step), starting runs, workers, errors with their codes and statuses, and the live
// streams with reconnects that resume from the last event id.
//
// One seeded store per backend; the tests run in order, reading first, then acting on
// chosen runs.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp, type HttpServer, serveHttp } from "../src/http/index.js";
import { advanceUntil, BACKENDS } from "./helpers/engines.js";
import { call, openStream, sharedHarness } from "./helpers/http.js";
import { type Seeded, seedRuns } from "./helpers/runs-fixture.js";
import { until } from "./helpers/sqlite.js";

type Json = Record<string, unknown>;
type RunJ = Json & { id: string; status: string };

describe.each(BACKENDS)("HTTP API on %s", (backend) => {
  const h = sharedHarness(backend);
  let seeded: Seeded;
  let app: ReturnType<typeof createHttpApp>;
  const api = <T = Json>(method: string, url: string, o: Parameters<typeof call>[3] = {}) =>
    call<T>(app.fetch, method, url, o);
  const statusOf = async (id: string) =>
    (await api<{ run: RunJ }>("GET", `/api/runs/${encodeURIComponent(id)}`)).body.run.status;

  beforeAll(async () => {
    seeded = await seedRuns(h);
    app = createHttpApp({ engine: seeded.client, clock: h.clock, pollIntervalMs: 20 });
  }, 120_000);
  afterAll(() => {
    app?.close();
    seeded?.releaseRunning();
  });

  it("lists runs in every status, newest first, as summaries", async () => {
    const { status, body } = await api<{ runs: RunJ[]; next?: string }>("GET", "/api/runs");
    expect(status).toBe(200);
    const byId = new Map(body.runs.map((r) => [r.id, r]));
    const i = seeded.ids;
    expect(
      Object.fromEntries(Object.entries(i).map(([k, id]) => [k, byId.get(id)?.status])),
    ).toEqual({
      completed: "completed",
      failed: "failed",
      waitingEvent: "waiting",
      sleeping: "waiting",
      pausedBudget: "paused",
      pausedVersion: "paused",
      canceled: "canceled",
      running: "running",
      pending: "pending",
      crashed: "completed",
    });
    expect(body.runs).toHaveLength(10);
    expect(body.next).toBeUndefined();
    const created = body.runs.map((r) => Date.parse(r.createdAt as string));
    expect(created).toEqual([...created].sort((a, b) => b - a));
    for (const r of body.runs) {
      expect(r).not.toHaveProperty("input");
      expect(r).not.toHaveProperty("output");
    }
    expect(byId.get(i.pausedBudget)).toMatchObject({
      pausedFor: "budget",
      reason: "budget: usd 1.35 of 1 spent",
      budget: { limit: { usd: 1 }, spent: { usd: expect.closeTo(1.35), tokens: 27_000 } },
    });
    expect(byId.get(i.pausedVersion)).toMatchObject({
      pausedFor: "version",
      reason: "no live worker has triage@0",
    });
    expect(byId.get(i.waitingEvent)).toMatchObject({ waitingFor: ["approval"] });
    expect(byId.get(i.sleeping)).not.toHaveProperty("waitingFor");
    expect(byId.get(i.sleeping)?.wakeAt).toBeTypeOf("string");
    expect(byId.get(i.failed)?.error).toMatchObject({ code: "FATAL", name: "FatalError" });

    for (const st of [
      "pending",
      "running",
      "waiting",
      "paused",
      "completed",
      "failed",
      "canceled",
    ]) {
      const one = await api<{ runs: RunJ[] }>("GET", `/api/runs?status=${st}`);
      expect(one.status).toBe(200);
      const expected = body.runs.filter((r) => r.status === st).map((r) => r.id);
      expect(one.body.runs.map((r) => r.id)).toEqual(expected);
    }
    const two = await api<{ runs: RunJ[] }>("GET", "/api/runs?status=failed,canceled");
    expect(two.body.runs.map((r) => r.id).sort()).toEqual([i.failed, i.canceled].sort());
  });

  it("filters by named view, workflow, version and id text, and pages with a cursor", async () => {
    const ids = async (q: string) =>
      (await api<{ runs: RunJ[] }>("GET", `/api/runs?${q}`)).body.runs.map((r) => r.id);
    const i = seeded.ids;
    expect(await ids("view=waiting-for-event")).toEqual([i.waitingEvent]);
    expect(await ids("view=waiting-for-event&status=running")).toEqual([]);
    expect((await ids("workflow=triage")).sort()).toEqual([i.completed, i.pausedVersion].sort());
    expect(await ids("workflow=triage&version=0")).toEqual([i.pausedVersion]);
    expect(await ids("version=0")).toEqual([i.pausedVersion]);
    expect((await ids("q=cool-down")).sort()).toEqual([i.sleeping, i.canceled].sort());
    expect(await ids("q=COOL")).toEqual([]);
    expect(await ids("q=%25")).toEqual([]);

    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await api<{ runs: RunJ[]; next?: string }>(
        "GET",
        `/api/runs?limit=3${cursor ? `&before=${cursor}` : ""}`,
      );
      expect(page.status).toBe(200);
      expect(page.body.runs.length).toBeLessThanOrEqual(3);
      seen.push(...page.body.runs.map((r) => r.id));
      cursor = page.body.next;
      pages += 1;
    } while (cursor && pages < 10);
    expect(pages).toBe(4);
    expect(seen).toEqual(await ids("limit=200"));

    for (const bad of [
      "limit=0",
      "limit=201",
      "limit=x",
      "status=done",
      "view=nope",
      "before=%%%",
    ]) {
      const res = await api<{ error: { code: string } }>("GET", `/api/runs?${bad}`);
      expect([bad, res.status, res.body.error.code]).toEqual([bad, 400, "VALIDATION"]);
    }
  });

  it("returns a run with input and output, its steps with every attempt, and its events", async () => {
    const i = seeded.ids;
    const { body } = await api<{ run: RunJ }>("GET", `/api/runs/${i.completed}`);
    expect(body.run).toMatchObject({
      id: i.completed,
      workflow: "triage",
      version: "1",
      status: "completed",
      input: { issue: 4812 },
      output: { pr: { url: "https://forge.example/pr/4812" } },
    });

    const steps = async (id: string) =>
      (
        await api<{ steps: Array<Json & { key: string; attempts: Json[] }> }>(
          "GET",
          `/api/runs/${encodeURIComponent(id)}/steps`,
        )
      ).body.steps;
    const triage = await steps(i.completed);
    expect(triage.map((s) => `${s.key}:${s.kind}:${s.status}`)).toEqual([
      "fetch-issue:step:completed",
      "plan:step:completed",
      "edit:step:completed",
      "edit#2:step:completed",
      "ci-settle:sleep:completed",
      "open-pr:effect:completed",
    ]);
    const plan = triage.find((s) => s.key === "plan")!;
    expect(plan.attempts).toHaveLength(2);
    expect(plan.attempts[0]).toMatchObject({ attempt: 1, error: { code: "RATE_LIMIT" } });
    expect(plan.attempts[1]).toMatchObject({ attempt: 2, spend: { tokens: 5400, usd: 0.11 } });
    expect(plan.result).toEqual({
      steps: ["reproduce", "patch config loader", "add regression test"],
    });
    expect(triage.find((s) => s.key === "ci-settle")?.intentAt).toBeTypeOf("string");

    const crashed = await steps(i.crashed);
    expect(
      crashed
        .find((s) => s.key === "copy-rows")
        ?.attempts.map((a) => (a.error as Json | undefined)?.code ?? "ok"),
    ).toEqual(["WORKER_LOST", "ok"]);
    const failed = await steps(i.failed);
    expect(failed.find((s) => s.key === "run-tests")).toMatchObject({
      status: "failed",
      error: { code: "FATAL", message: "The test runner crashed: out of memory" },
    });
    expect(failed.find((s) => s.key === "run-tests")?.attempts).toHaveLength(3);
    expect((await steps(i.sleeping)).find((s) => s.key === "cool-down")).toMatchObject({
      kind: "sleep",
      status: "waiting",
    });
    expect(await steps(i.pending)).toEqual([]);

    const events = await api<{ events: Json[] }>("GET", `/api/runs/${i.waitingEvent}/events`);
    expect(events).toMatchObject({ status: 200, body: { events: [] } });
  });

  it("answers 404 RUN_NOT_FOUND on every run route for a run that does not exist", async () => {
    const routes: Array<[string, string, unknown?]> = [
      ["GET", "/api/runs/nope"],
      ["GET", "/api/runs/nope/steps"],
      ["GET", "/api/runs/nope/events"],
      ["GET", "/api/live/runs/nope"],
      ["POST", "/api/runs/nope/events/go", { ok: true }],
      ["POST", "/api/runs/nope/cancel"],
      ["POST", "/api/runs/nope/resume"],
      ["POST", "/api/runs/nope/fork", { fromStep: "a" }],
    ];
    for (const [method, url, body] of routes) {
      const res = await api<{ error: { code: string; message: string } }>(
        method,
        url,
        body === undefined ? {} : { body },
      );
      expect([url, res.status, res.body.error.code]).toEqual([url, 404, "RUN_NOT_FOUND"]);
      expect(res.body.error.message).toContain('"nope"');
    }
    const unknown = await api<{ error: { code: string } }>("GET", "/api/nothing-here");
    expect([unknown.status, unknown.body.error.code]).toEqual([404, "NOT_FOUND"]);
  });

  it("lists the workflows it can start, and workers with the runs no live worker serves", async () => {
    const wf = await api<{ workflows: Json[] }>("GET", "/api/workflows");
    expect(wf.body.workflows.map((w) => w.id).sort()).toEqual(
      seeded.workflows.map((w) => w.id).sort(),
    );
    const { body } = await api<{ workers: Json[]; unserved: RunJ[] }>("GET", "/api/workers");
    const live = body.workers.filter((w) => w.live);
    expect(live.map((w) => w.id)).toEqual([seeded.worker.workerId]);
    expect([...((live[0]?.workflows as string[] | undefined) ?? [])].sort()).toEqual([
      "cool-down@1",
      "deploy@1",
      "fix-tests@1",
      "index-repo@1",
      "migrate@1",
      "research@1",
      "triage@1",
    ]);
    // The worker that was cut off from the store mid-step is still registered, not live.
    expect(body.workers.filter((w) => !w.live).map((w) => w.workflows)).toEqual([["migrate@1"]]);
    expect(body.unserved.map((r) => r.id)).toEqual([seeded.ids.pausedVersion]);
  });

  it("starts runs of registered workflows, and says why it cannot", async () => {
    const started = await api<{ run: RunJ; created: boolean }>("POST", "/api/runs", {
      body: { workflow: "deploy", input: { service: "web" }, id: "deploy-web", budget: { usd: 2 } },
    });
    expect(started.status).toBe(201);
    expect(started.body).toMatchObject({
      created: true,
      run: {
        id: "deploy-web",
        workflow: "deploy",
        version: "1",
        input: { service: "web" },
        budget: { limit: { usd: 2 } },
      },
    });
    const again = await api<{ run: RunJ; created: boolean }>("POST", "/api/runs", {
      body: { workflow: "deploy", input: { service: "web" }, id: "deploy-web" },
    });
    expect([again.status, again.body.created, again.body.run.id]).toEqual([
      200,
      false,
      "deploy-web",
    ]);

    const err = async (body: unknown) => {
      const res = await api<{ error: { code: string; message: string } }>("POST", "/api/runs", {
        body,
      });
      return [res.status, res.body.error.code, res.body.error.message] as const;
    };
    const [s1, c1, m1] = await err({ workflow: "triage" });
    expect([s1, c1]).toEqual([400, "VALIDATION"]);
    expect(m1).toMatch(/several versions registered \(1, 0\)|several versions registered \(0, 1\)/);
    const [s2, c2, m2] = await err({ workflow: "nope" });
    expect([s2, c2]).toEqual([404, "UNKNOWN_WORKFLOW"]);
    expect(m2).toContain("registered: triage@1");
    expect((await err({ workflow: "triage", version: "7" })).slice(0, 2)).toEqual([
      404,
      "UNKNOWN_WORKFLOW",
    ]);
    expect((await err({ workflow: "deploy", id: seeded.ids.completed })).slice(0, 2)).toEqual([
      409,
      "RUN_CONFLICT",
    ]);
    expect((await err({ workflow: "deploy", budget: { usd: -1 } })).slice(0, 2)).toEqual([
      400,
      "VALIDATION",
    ]);
    expect((await err({ workflow: "deploy", extra: 1 })).slice(0, 2)).toEqual([400, "VALIDATION"]);
    expect((await err({})).slice(0, 2)).toEqual([400, "VALIDATION"]);

    // A server given no workflows says so.
    const bare = createHttpApp({ engine: h.engine([], { worker: false }) });
    const res = await call<{ error: { code: string; message: string } }>(
      bare.fetch,
      "POST",
      "/api/runs",
      {
        body: { workflow: "deploy" },
      },
    );
    expect([res.status, res.body.error.code]).toEqual([404, "UNKNOWN_WORKFLOW"]);
    expect(res.body.error.message).toMatch(/no workflows registered.*--module/);
    bare.close();
  });

  it("sends an event once per idempotency key; the waiting run completes", async () => {
    const id = seeded.ids.waitingEvent;
    const send = (payload: unknown, key?: string) =>
      api<{ event: Json; duplicate: boolean; error?: { code: string } }>(
        "POST",
        `/api/runs/${id}/events/approval`,
        {
          body: payload,
          ...(key ? { headers: { "idempotency-key": key } } : {}),
        },
      );
    const first = await send({ ok: true, by: "ana" }, "delivery-7");
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({
      duplicate: false,
      event: { name: "approval", payload: { ok: true, by: "ana" }, idempotencyKey: "delivery-7" },
    });
    const repeat = await send({ ok: true, by: "ana" }, "delivery-7");
    expect(repeat.status).toBe(200);
    expect(repeat.body.duplicate).toBe(true);
    expect((repeat.body.event as Json).seq).toBe((first.body.event as Json).seq);
    const other = await send({ ok: false }, "delivery-7");
    expect([other.status, other.body.error?.code]).toEqual([409, "RUN_CONFLICT"]);

    await advanceUntil(
      h.clock,
      until(async () => (await statusOf(id)) === "completed", "deploy completes"),
      200,
    );
    const events = await api<{ events: Json[] }>("GET", `/api/runs/${id}/events`);
    expect(events.body.events).toHaveLength(1);
    expect(events.body.events[0]).toMatchObject({ name: "approval", consumedBy: "approval" });
    // The same delivery again, after the run finished: still one event, still a 200.
    expect((await send({ ok: true, by: "ana" }, "delivery-7")).status).toBe(200);
    const late = await send({ ok: true });
    expect([late.status, late.body.error?.code]).toEqual([409, "RUN_CONFLICT"]);
    const reserved = await api<{ error: { code: string } }>(
      "POST",
      `/api/runs/${id}/events/cairn.x`,
    );
    expect([reserved.status, reserved.body.error.code]).toEqual([400, "VALIDATION"]);
  });

  it("cancels a sleeping run at once; a finished run cannot be canceled", async () => {
    const id = seeded.ids.sleeping;
    const res = await api<{ run: RunJ; state: string }>("POST", `/api/runs/${id}/cancel`, {
      body: { reason: "maintenance window" },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      state: "canceled",
      run: { status: "canceled", reason: "maintenance window" },
    });
    const done = await api<{ error: { code: string } }>(
      "POST",
      `/api/runs/${seeded.ids.completed}/cancel`,
    );
    expect([done.status, done.body.error.code]).toEqual([409, "RUN_CONFLICT"]);
  });

  it("resumes a run paused over budget with a raised limit", async () => {
    const id = seeded.ids.pausedBudget;
    const refused = await api<{ error: { code: string } }>(
      "POST",
      `/api/runs/${seeded.ids.completed}/resume`,
    );
    expect([refused.status, refused.body.error.code]).toEqual([409, "RUN_CONFLICT"]);
    const res = await api<{ run: RunJ }>("POST", `/api/runs/${id}/resume`, {
      body: { budget: { usd: 3 } },
    });
    expect(res.status).toBe(200);
    expect(res.body.run.budget).toMatchObject({ limit: { usd: 3 } });
    await advanceUntil(
      h.clock,
      until(async () => (await statusOf(id)) === "completed", "research completes"),
      200,
    );
    const run = (await api<{ run: RunJ }>("GET", `/api/runs/${id}`)).body.run;
    expect(run).toMatchObject({
      output: "published",
      budget: { spent: { usd: expect.closeTo(1.8) } },
    });
  });

  it("forks a failed run from its failed step, and a completed one from any step", async () => {
    const failed = seeded.ids.failed;
    const res = await api<{ run: RunJ }>("POST", `/api/runs/${failed}/fork`, {
      body: { fromStep: "run-tests", id: "fix-tests-retry" },
    });
    expect(res.status).toBe(201);
    expect(res.body.run).toMatchObject({
      id: "fix-tests-retry",
      workflow: "fix-tests",
      version: "1",
    });
    const steps = (
      await api<{ steps: Array<Json & { key: string }> }>("GET", "/api/runs/fix-tests-retry/steps")
    ).body.steps;
    // The completed step is carried over; the failed one starts afresh (its attempts stay behind).
    expect(steps.find((s) => s.key === "checkout")).toMatchObject({ status: "completed" });
    expect(
      steps.filter((s) => s.key === "run-tests").flatMap((s) => s.attempts as Json[]).length,
    ).toBeLessThan(3);
    expect(await statusOf(failed)).toBe("failed");

    const onV0 = await api<{ run: RunJ }>("POST", `/api/runs/${seeded.ids.completed}/fork`, {
      body: { fromStep: "edit#2", version: "0" },
    });
    expect(onV0.status).toBe(201);
    expect(onV0.body.run).toMatchObject({ workflow: "triage", version: "0" });
    const bad = await api<{ error: { code: string; message: string } }>(
      "POST",
      `/api/runs/${failed}/fork`,
      {
        body: { fromStep: "nope" },
      },
    );
    expect([bad.status, bad.body.error.code]).toEqual([409, "RUN_CONFLICT"]);
    expect(bad.body.error.message).toContain("checkout, run-tests");
  });

  describe("live streams", () => {
    let server: HttpServer;
    beforeAll(async () => {
      server = await serveHttp({
        engine: seeded.client,
        port: 0,
        clock: h.clock,
        pollIntervalMs: 20,
      });
    });
    afterAll(async () => {
      await server?.close();
    });

    it("streams a run: snapshot, then its events, steps and status as they happen", async () => {
      await api("POST", "/api/runs", {
        body: { workflow: "deploy", input: { service: "db" }, id: "deploy-db" },
      });
      await advanceUntil(
        h.clock,
        until(async () => (await statusOf("deploy-db")) === "waiting", "deploy-db waits"),
        200,
      );
      const stream = await openStream(`${server.url}/api/live/runs/deploy-db`);
      expect(stream.status).toBe(200);
      const snap = await stream.next((m) => m.event === "snapshot", "snapshot");
      expect(snap.data).toMatchObject({ run: { id: "deploy-db", status: "waiting" }, events: [] });
      expect((snap.data as { steps: Json[] }).steps.map((s) => s.key)).toEqual([
        "build",
        "approval",
      ]);

      await api("POST", "/api/runs/deploy-db/events/approval", { body: { ok: true, by: "li" } });
      await stream.next((m) => m.event === "run-event", "the event, sent");
      await advanceUntil(
        h.clock,
        stream.next(
          (m) => m.event === "run" && (m.data as { run: RunJ }).run.status === "completed",
          "completed",
        ),
        200,
      );
      const stepKeys = stream.messages
        .filter((m) => m.event === "step")
        .map((m) => (m.data as { step: Json }).step.key);
      expect(stepKeys).toContain("approval");
      expect(stepKeys).toContain("roll-out");
      const ids = stream.messages.map((m) => m.id);
      expect(new Set(ids).size).toBe(ids.length);
      stream.close();
    });

    it("resumes from Last-Event-ID with exactly what was missed; an unknown id gets a snapshot", async () => {
      await api("POST", "/api/runs", {
        body: { workflow: "deploy", input: { service: "q" }, id: "deploy-q" },
      });
      await advanceUntil(
        h.clock,
        until(async () => (await statusOf("deploy-q")) === "waiting", "deploy-q waits"),
        200,
      );
      // A second listener keeps the watcher (and its ring) alive while the first is away.
      const keeper = await openStream(`${server.url}/api/live/runs/deploy-q`);
      const first = await openStream(`${server.url}/api/live/runs/deploy-q`);
      const snap = await first.next((m) => m.event === "snapshot", "snapshot");
      first.close();

      await api("POST", "/api/runs/deploy-q/events/approval", { body: { ok: false } });
      await advanceUntil(
        h.clock,
        keeper.next(
          (m) => m.event === "run" && (m.data as { run: RunJ }).run.status === "completed",
          "keeper sees completion",
        ),
        200,
      );
      const missed = keeper.messages.filter((m) => m.event !== "snapshot");

      const again = await openStream(`${server.url}/api/live/runs/deploy-q`, {
        "last-event-id": snap.id!,
      });
      const last = missed[missed.length - 1]!;
      await again.next((m) => m.id === last.id, "the last missed event");
      expect(again.messages.map((m) => [m.id, m.event])).toEqual(
        missed.map((m) => [m.id, m.event]),
      );
      again.close();

      const stranger = await openStream(`${server.url}/api/live/runs/deploy-q`, {
        "last-event-id": "elsewhere.12",
      });
      const fresh = await stranger.next(() => true, "first message");
      expect(fresh.event).toBe("snapshot");
      expect((fresh.data as { run: RunJ }).run.status).toBe("completed");
      stranger.close();
      keeper.close();
    });

    it("streams a page of runs: a run that leaves the filter is reported", async () => {
      await api("POST", "/api/runs", {
        body: { workflow: "deploy", input: { service: "x" }, id: "deploy-x" },
      });
      await advanceUntil(
        h.clock,
        until(async () => (await statusOf("deploy-x")) === "waiting", "deploy-x waits"),
        200,
      );
      const stream = await openStream(`${server.url}/api/live/runs?view=waiting-for-event`);
      const snap = await stream.next((m) => m.event === "snapshot", "snapshot");
      expect((snap.data as { runs: RunJ[] }).runs.map((r) => r.id)).toContain("deploy-x");
      await api("POST", "/api/runs/deploy-x/cancel");
      const left = await stream.next((m) => m.event === "leave", "deploy-x leaves");
      expect(left.data).toEqual({ id: "deploy-x" });
      stream.close();

      const workers = await openStream(`${server.url}/api/live/workers`);
      const w = await workers.next((m) => m.event === "snapshot", "workers snapshot");
      expect((w.data as { unserved: RunJ[] }).unserved.map((r) => r.id)).toContain(
        seeded.ids.pausedVersion,
      );
      workers.close();
    });
  });
});
