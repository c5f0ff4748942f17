// Typed approvals through the engine, on both backends: approve, reject, timeout, a forged
// link, a reused link, an expired link, an answer to a finished run, each with its defined
// outcome; a waiting run holds no lease and no execution; schemas check the request and
// the answer; a recorded decision replays after a crash instead of being asked again.

import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  type ApprovalResult,
  ApprovalTokenError,
  createApprovalToken,
  RunConflictError,
  workflow,
} from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const KEYS = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];
const HOUR = 3_600_000;

const review = workflow({ name: "review", version: "1" }, async (ctx, input: { diff: string }) => {
  await ctx.step("plan", () => "plan");
  const answer = await ctx.approval("merge", {
    request: { summary: "Merge the fix", diff: input.diff },
    timeout: "2d",
    onTimeout: "reject",
  });
  return answer;
});

async function waiting(h: Harness, id: string, engineOpts = {}) {
  const e = h.engine([review], { approvalKeys: KEYS, ...engineOpts });
  await e.start(review, { diff: "+fix" }, { id });
  await until(async () => (await e.getRun(id))?.status === "waiting", `${id} waits for approval`);
  return e;
}

describe.each(BACKENDS)("approvals on %s", (backend) => {
  const harness = useHarness(backend);

  it("approve: the request is stored, the run waits holding nothing, the answer records who, when and why", async () => {
    const h = harness();
    const e = await waiting(h, "a1");
    const store = h.store();
    await store.open({ clock: h.clock });
    const row = await store.getRun("a1");
    await store.close();
    expect(row).toMatchObject({ status: "waiting", leaseOwner: null, leaseUntil: null });
    expect(row?.waitingFor).toEqual(["cairn.approval:merge"]);
    // An execution ends just after its release commits: wait for that, not a fixed time.
    await until(() => e.metrics().activeExecutions === 0, "no execution held while a1 waits");
    expect(
      (await e.listRuns({ waitingForEventPrefix: "cairn.approval:" })).map((r) => r.id),
    ).toEqual(["a1"]);
    const [pending] = await e.listApprovals("a1");
    expect(pending).toMatchObject({
      key: "merge",
      name: "merge",
      status: "pending",
      onTimeout: "reject",
      request: { summary: "Merge the fix", diff: "+fix" },
    });
    expect(pending?.deadline?.getTime()).toBe(pending!.requestedAt.getTime() + 48 * HOUR);

    await h.clock.advance(HOUR);
    const view = await e.approve("a1", "merge", { by: "alice", comment: "looks good", via: "cli" });
    expect(view).toMatchObject({ status: "approved", answeredBy: "alice", comment: "looks good" });
    const out = (await e.handle("a1").result()) as ApprovalResult;
    expect(out).toEqual({
      approved: true,
      decision: "approved",
      timedOut: false,
      by: "alice",
      at: view.answeredAt,
      comment: "looks good",
      via: "cli",
    });
    // Decided once: a second answer changes nothing.
    await expect(e.reject("a1", "merge", { by: "mallory" })).rejects.toThrow(
      /already approved by alice .*nothing was changed/,
    );
    expect((await e.listEvents("a1")).map((ev) => ev.name)).toEqual(["cairn.approval:merge"]);
    expect((await e.listApprovals("a1"))[0]).toEqual(view);
  });

  it("reject from another process (a client engine), while the worker is stopped", async () => {
    const h = harness();
    const e = await waiting(h, "r1");
    await e.close();
    const client = h.engine([], { worker: false });
    await client.reject("r1", "merge", { by: "bob", comment: "tests missing" });
    const worker = h.engine([review]);
    const out = (await worker.handle("r1").result()) as ApprovalResult;
    expect(out).toMatchObject({
      approved: false,
      decision: "rejected",
      by: "bob",
      timedOut: false,
    });
  });

  it("timeout: the run takes its declared decision, and a late answer is refused", async () => {
    const h = harness();
    const approveOnTimeout = workflow({ name: "lenient", version: "1" }, async (ctx) =>
      ctx.approval("ship", { request: "ship it?", timeout: "1h", onTimeout: "approve" }),
    );
    const e = h.engine([approveOnTimeout]);
    const run = await e.start(approveOnTimeout, undefined, { id: "t1" });
    await until(async () => (await e.getRun("t1"))?.status === "waiting", "t1 waits");
    const asked = (await e.listApprovals("t1"))[0]!;
    const out = (await advanceUntil(h.clock, run.result(), 10 * 60_000)) as ApprovalResult;
    expect(out).toEqual({
      approved: true,
      decision: "approved",
      timedOut: true,
      at: new Date(asked.requestedAt.getTime() + HOUR),
    });
    await expect(e.reject("t1", "ship", { by: "late" })).rejects.toBeInstanceOf(RunConflictError);
    expect((await e.listApprovals("t1"))[0]?.status).toBe("timed-out");
  });

  it("an answer just past the deadline is refused and the run times out as declared", async () => {
    const h = harness();
    const e = await waiting(h, "t2");
    await e.close();
    await h.clock.advance(48 * HOUR);
    const client = h.engine([], { worker: false });
    await expect(client.approve("t2", "merge", { by: "late" })).rejects.toThrow(
      /timed out at .*declared decision \(reject\)/,
    );
    const worker = h.engine([review]);
    const out = (await worker.handle("t2").result()) as ApprovalResult;
    expect(out).toMatchObject({ approved: false, timedOut: true });
    expect(await worker.listEvents("t2")).toEqual([]);
  });

  it("approval links: a valid one answers once; reused, forged, altered or expired ones change nothing", async () => {
    const h = harness();
    const e = await waiting(h, "l1");
    const approveToken = await e.approvalToken("l1", "merge", "approve", {
      by: "carol@example.com",
      expiresIn: "1d",
    });
    const rejectToken = await e.approvalToken("l1", "merge", "reject");

    // Forged: signed with a key this engine does not have.
    const forged = createApprovalToken([{ id: "k1", secret: "x".repeat(40) }], {
      runId: "l1",
      key: "merge",
      decision: "approve",
      expiresAt: h.clock.now() + HOUR,
    });
    await expect(e.answerApprovalLink(forged)).rejects.toThrow(/signature is not valid/);
    // Altered: the claims of a real token changed (reject -> approve), signature kept.
    const [p, kid, claims, sig] = rejectToken.split(".");
    const body = JSON.parse(Buffer.from(claims!, "base64url").toString()) as Record<
      string,
      unknown
    >;
    const altered = [
      p,
      kid,
      Buffer.from(JSON.stringify({ ...body, d: "approve" })).toString("base64url"),
      sig,
    ].join(".");
    await expect(e.answerApprovalLink(altered)).rejects.toBeInstanceOf(ApprovalTokenError);
    await expect(e.answerApprovalLink("not a token")).rejects.toBeInstanceOf(ApprovalTokenError);
    // Expired.
    const shortLived = await e.approvalToken("l1", "merge", "approve", { expiresIn: "1m" });
    await h.clock.advance(2 * 60_000);
    await expect(e.answerApprovalLink(shortLived)).rejects.toThrow(/expired/);
    expect((await e.listApprovals("l1"))[0]?.status).toBe("pending");
    expect(await e.listEvents("l1")).toEqual([]);

    const info = await e.inspectApprovalLink(approveToken);
    expect(info).toMatchObject({ decision: "approve", by: "carol@example.com" });
    expect(info.approval.request).toEqual({ summary: "Merge the fix", diff: "+fix" });
    const view = await e.answerApprovalLink(approveToken, { comment: "via email" });
    expect(view).toMatchObject({
      status: "approved",
      answeredBy: "carol@example.com",
      via: "link",
    });
    const out = (await e.handle("l1").result()) as ApprovalResult;
    expect(out).toMatchObject({
      approved: true,
      by: "carol@example.com",
      via: "link",
      comment: "via email",
    });
    // Reused: the same link again, and the other link, are refused; nothing changes.
    await expect(e.answerApprovalLink(approveToken)).rejects.toThrow(/already used/);
    await expect(e.answerApprovalLink(rejectToken)).rejects.toThrow(/already approved/);
    expect(await e.listEvents("l1")).toHaveLength(1);
  });

  it("an approval of a finished run cannot be answered", async () => {
    const h = harness();
    const e = await waiting(h, "f1");
    // Made while it was pending: a token for a closed approval is refused (h5).
    const token = await e.approvalToken("f1", "merge", "approve");
    await e.cancel("f1", "not needed");
    await until(async () => (await e.getRun("f1"))?.status === "canceled", "f1 canceled");
    await expect(e.approve("f1", "merge", { by: "x" })).rejects.toThrow(
      /is canceled: its approval "merge" can no longer be answered/,
    );
    await expect(e.approvalToken("f1", "merge", "approve")).rejects.toBeInstanceOf(
      RunConflictError,
    );
    await expect(e.answerApprovalLink(token)).rejects.toBeInstanceOf(RunConflictError);
    expect((await e.listApprovals("f1"))[0]?.status).toBe("closed");
    expect(await e.listEvents("f1")).toEqual([]);
    await expect(e.approve("nope", "merge")).rejects.toThrow(/does not exist/);
    const other = await waiting(h, "f2");
    await expect(other.approve("f2", "deploy")).rejects.toThrow(/has no approval "deploy"/);
    // A comment cut mid-emoji (an LLM's summary sliced) or with NUL is refused, not altered.
    await expect(
      other.approve("f2", "merge", { by: "x", comment: "👍 ok".slice(1) }),
    ).rejects.toThrow(/lone surrogate/);
    await expect(other.approve("f2", "merge", { by: "a\u0000b" })).rejects.toThrow(/NUL/);
    expect((await other.listApprovals("f2"))[0]?.status).toBe("pending");
  });

  it("schemas: an invalid request is never asked; an invalid answer fails the call", async () => {
    const h = harness();
    const typed = workflow(
      { name: "typed", version: "1" },
      async (ctx, input: { title: unknown }) => {
        let first = "";
        try {
          await ctx.approval("bad-request", {
            request: { title: 42 as unknown as string },
            schema: { request: z.object({ title: z.string() }) },
          });
        } catch (err) {
          first = `${(err as Error).name}: ${(err as Error).message}`;
        }
        let second = "";
        try {
          await ctx.approval("pick", {
            request: { title: input.title },
            schema: { answer: z.object({ choice: z.enum(["a", "b"]) }) },
          });
        } catch (err) {
          second = `${(err as Error).name}: ${(err as Error).message}`;
        }
        const third = await ctx.approval("pick2", {
          request: "again",
          schema: { answer: z.object({ choice: z.enum(["a", "b"]) }) },
        });
        return { first, second, third: third.answer };
      },
    );
    const e = h.engine([typed]);
    await e.start(typed, { title: "t" }, { id: "s1" });
    await until(
      async () => (await e.getRun("s1"))?.waitingFor?.[0] === "cairn.approval:pick",
      "pick",
    );
    expect((await e.listApprovals("s1")).map((a) => a.key)).toEqual(["pick"]);
    await e.approve("s1", "pick", { by: "u", answer: { choice: "c" } });
    await until(
      async () => (await e.getRun("s1"))?.waitingFor?.[0] === "cairn.approval:pick2",
      "pick2",
    );
    await e.approve("s1", "pick2", { by: "u", answer: { choice: "b" } });
    const out = (await e.handle("s1").result()) as Record<string, unknown>;
    expect(out.first).toMatch(
      /^InputValidationError: The request of approval "bad-request" .*title/,
    );
    expect(out.second).toMatch(/^InputValidationError: The answer to approval "pick" .*choice/);
    expect(out.third).toEqual({ choice: "b" });
  });

  it("a recorded decision replays after a crash; the run asks only once", async () => {
    const h = harness();
    let hang = true;
    let afterStarted = false;
    const wf = workflow({ name: "replayed", version: "1" }, async (ctx) => {
      const a = await ctx.approval("go", { request: "go?" });
      const b = await ctx.step("after", async () => {
        if (hang) {
          afterStarted = true;
          await new Promise(() => {});
        }
        return "after";
      });
      return { a, b };
    });
    const first = crashableEngine(h, [wf]);
    await first.engine.start(wf, undefined, { id: "p1" });
    await until(async () => (await first.engine.getRun("p1"))?.status === "waiting", "p1 waits");
    await first.engine.approve("p1", "go", { by: "dana" });
    await until(() => afterStarted, "the step after the approval runs");
    first.crash();
    hang = false;
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    const out = (await advanceUntil(h.clock, second.handle("p1").result(), 30_000)) as {
      a: ApprovalResult;
    };
    expect(out.a).toMatchObject({ approved: true, by: "dana" });
    expect(await second.listApprovals("p1")).toHaveLength(1);
    expect((await second.getSteps("p1")).find((s) => s.key === "go")).toMatchObject({
      kind: "approval",
      status: "completed",
    });
  });
});
