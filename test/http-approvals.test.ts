// Approvals over HTTP, on both backends: the waiting-approval view, a run's approvals,
// approve and reject (act role; a second answer is a 409), approval links that need no
// token and answer once (forged, altered, expired, replayed, or for a finished run:
// refused, nothing changes), the link's page, the run page's approve/reject dialogs, and
// every answer matching the OpenAPI document (checked by zod from the document's schemas).

import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createHttpApp } from "../src/http/index.js";
import { type ApprovalResult, createApprovalToken, workflow } from "../src/index.js";
import { BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

type Json = Record<string, unknown>;
const KEYS = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];
const TOKEN = "http-approvals-token-0123";
const READ = "http-approvals-read-0123";

const review = workflow({ name: "http-review", version: "1" }, async (ctx, input: { pr: number }) =>
  ctx.approval("merge", {
    request: { summary: `Merge PR ${input.pr}`, diff: "--- a/x\n+++ b/x\n-old\n+new" },
    timeout: "2d",
  }),
);

async function setup(h: Harness, ids: string[]) {
  const worker = h.engine([review], { approvalKeys: KEYS });
  const client = h.engine([review], { worker: false, approvalKeys: KEYS });
  for (const id of ids) await worker.start(review, { pr: ids.indexOf(id) + 1 }, { id });
  for (const id of ids) {
    await until(async () => (await client.getRun(id))?.status === "waiting", `${id} waits`);
  }
  const app = createHttpApp({ engine: client, clock: h.clock, token: TOKEN, readToken: READ });
  const auth = { authorization: `Bearer ${TOKEN}` };
  const doc = (await call<Json>(app.fetch, "GET", "/api/openapi.json", { headers: auth })).body as {
    paths: Record<string, Record<string, Json>>;
    components: { schemas: Json };
  };
  /** Checks an answer against the document's schema for its status. */
  const conforms = (operationId: string, res: { status: number; body: unknown }) => {
    const op = Object.values(doc.paths)
      .flatMap((item) => Object.values(item))
      .find((o) => o.operationId === operationId) as
      | { responses: Record<string, { content?: Record<string, { schema?: Json }> }> }
      | undefined;
    expect(op, operationId).toBeDefined();
    const schema = op?.responses[String(res.status)]?.content?.["application/json"]?.schema;
    expect(schema, `${operationId} ${res.status} is documented`).toBeDefined();
    const text = JSON.stringify(schema).replaceAll('"#/components/schemas/', '"#/$defs/');
    const defs = JSON.parse(
      JSON.stringify(doc.components.schemas).replaceAll('"#/components/schemas/', '"#/$defs/'),
    );
    const parsed = z.fromJSONSchema({ ...JSON.parse(text), $defs: defs }).safeParse(res.body);
    expect(
      parsed.success,
      `${operationId} ${res.status}: ${JSON.stringify(parsed.error?.issues.slice(0, 3))}`,
    ).toBe(true);
  };
  return { worker, client, app, auth, doc, conforms };
}

describe.each(BACKENDS)("approvals over HTTP on %s", (backend) => {
  const harness = useHarness(backend);

  it("the waiting-approval view, a run's approvals, approve and reject as documented", async () => {
    const h = harness();
    const { worker, app, auth, conforms } = await setup(h, ["h1", "h2"]);
    const view = await call<Json>(app.fetch, "GET", "/api/runs?view=waiting-approval", {
      headers: auth,
    });
    expect(view.status).toBe(200);
    expect((view.body.runs as Json[]).map((r) => r.id).sort()).toEqual(["h1", "h2"]);

    const list = await call<Json>(app.fetch, "GET", "/api/runs/h1/approvals", { headers: auth });
    conforms("listApprovals", list);
    expect((list.body.approvals as Json[])[0]).toMatchObject({
      key: "merge",
      status: "pending",
      request: { summary: "Merge PR 1", diff: "--- a/x\n+++ b/x\n-old\n+new" },
      onTimeout: "reject",
    });

    const readOnly = await call<Json>(app.fetch, "POST", "/api/runs/h1/approvals/merge/approve", {
      headers: { authorization: `Bearer ${READ}` },
    });
    expect(readOnly.status).toBe(403);
    const anonymous = await call<Json>(app.fetch, "POST", "/api/runs/h1/approvals/merge/approve");
    expect(anonymous.status).toBe(401);

    const ok = await call<Json>(app.fetch, "POST", "/api/runs/h1/approvals/merge/approve", {
      headers: auth,
      body: { by: "alice", comment: "LGTM", via: "dashboard" },
    });
    conforms("approveApproval", ok);
    expect(ok.status).toBe(200);
    expect(ok.body.approval).toMatchObject({
      status: "approved",
      answeredBy: "alice",
      comment: "LGTM",
      via: "dashboard",
    });
    const out = (await worker.handle("h1").result()) as ApprovalResult;
    expect(out).toMatchObject({ approved: true, by: "alice", comment: "LGTM" });

    const again = await call<Json>(app.fetch, "POST", "/api/runs/h1/approvals/merge/reject", {
      headers: auth,
      body: {},
    });
    conforms("rejectApproval", again);
    expect(again.status).toBe(409);
    expect((again.body.error as Json).message).toMatch(/already approved by alice/);
    const missing = await call<Json>(app.fetch, "POST", "/api/runs/h2/approvals/deploy/reject", {
      headers: auth,
    });
    conforms("rejectApproval", missing);
    expect(missing.status).toBe(404);
    expect((missing.body.error as Json).code).toBe("APPROVAL_NOT_FOUND");
    const noRun = await call<Json>(app.fetch, "GET", "/api/runs/nope/approvals", { headers: auth });
    conforms("listApprovals", noRun);
    expect(noRun.status).toBe(404);

    const no = await call<Json>(app.fetch, "POST", "/api/runs/h2/approvals/merge/reject", {
      headers: auth,
    });
    expect(no.body.approval).toMatchObject({ status: "rejected", answeredBy: "api", via: "api" });
    await expect(worker.handle("h2").result()).resolves.toMatchObject({ approved: false });
  });

  it("approval links need no token and answer once; forged, altered, expired and replayed ones change nothing", async () => {
    const h = harness();
    const { client, worker, app, conforms } = await setup(h, ["l1", "l2"]);
    const token = await client.approvalToken("l1", "merge", "approve", { by: "carol" });

    // Opening the link's page (no sign-in) shows the request and answers nothing.
    const page = await app.fetch(new Request(`http://localhost/approvals/${token}`));
    expect(page.status).toBe(200);
    const htmlText = await page.text();
    expect(htmlText).toContain("Merge PR 1");
    expect(htmlText).toContain("+++ b/x\n-old\n+new");
    expect(htmlText).toContain(`data-api="/api/approval-links/${token}"`);
    const inspected = await call<Json>(app.fetch, "GET", `/api/approval-links/${token}`);
    conforms("inspectApprovalLink", inspected);
    expect(inspected.body).toMatchObject({ decision: "approve", by: "carol" });
    expect((await client.listApprovals("l1"))[0]?.status).toBe("pending");

    const forged = createApprovalToken([{ id: "k1", secret: "f".repeat(40) }], {
      runId: "l1",
      key: "merge",
      decision: "approve",
      expiresAt: h.clock.now() + 60_000,
    });
    const [p, kid, claims, sig] = token.split(".");
    const body = JSON.parse(Buffer.from(claims!, "base64url").toString()) as Json;
    const altered = [
      p,
      kid,
      Buffer.from(JSON.stringify({ ...body, r: "l2" })).toString("base64url"),
      sig,
    ].join(".");
    for (const bad of [forged, altered, "ca1.k1.e30.AAAA"]) {
      const res = await call<Json>(app.fetch, "POST", `/api/approval-links/${bad}`, { body: {} });
      conforms("answerApprovalLink", res);
      expect(res.status).toBe(403);
      expect((res.body.error as Json).code).toBe("APPROVAL_TOKEN");
      const shown = await app.fetch(new Request(`http://localhost/approvals/${bad}`));
      expect(shown.status).toBe(403);
    }
    // Cross-site: a page elsewhere cannot make a browser use a link.
    const foreign = await call<Json>(app.fetch, "POST", `/api/approval-links/${token}`, {
      headers: { origin: "https://evil.example" },
    });
    expect(foreign.status).toBe(403);
    expect(await client.listEvents("l1")).toEqual([]);

    const used = await call<Json>(app.fetch, "POST", `/api/approval-links/${token}`, {
      body: { comment: "from my phone" },
    });
    conforms("answerApprovalLink", used);
    expect(used.status).toBe(200);
    expect(used.body.approval).toMatchObject({
      status: "approved",
      answeredBy: "carol",
      via: "link",
    });
    await expect(worker.handle("l1").result()).resolves.toMatchObject({
      by: "carol",
      comment: "from my phone",
    });

    const replay = await call<Json>(app.fetch, "POST", `/api/approval-links/${token}`, {
      body: {},
    });
    conforms("answerApprovalLink", replay);
    expect(replay.status).toBe(409);
    expect((replay.body.error as Json).message).toMatch(/already used/);
    const spent = await (
      await app.fetch(new Request(`http://localhost/approvals/${token}`))
    ).text();
    expect(spent).toContain("This approval was approved through an approval link.");
    expect(spent).not.toContain("<form");
    expect(await client.listEvents("l1")).toHaveLength(1);

    // Expired, and for a finished run.
    const late = await client.approvalToken("l2", "merge", "reject", { expiresIn: "1m" });
    await h.clock.advance(2 * 60_000);
    const expired = await call<Json>(app.fetch, "POST", `/api/approval-links/${late}`);
    expect(expired.status).toBe(403);
    expect((expired.body.error as Json).message).toMatch(/expired/);
    const fresh = await client.approvalToken("l2", "merge", "reject");
    await client.cancel("l2");
    await until(async () => (await client.getRun("l2"))?.status === "canceled", "l2 canceled");
    const finished = await call<Json>(app.fetch, "POST", `/api/approval-links/${fresh}`);
    conforms("answerApprovalLink", finished);
    expect(finished.status).toBe(409);
    expect((finished.body.error as Json).message).toMatch(/is canceled/);
    expect(await client.listEvents("l2")).toEqual([]);
  });

  it("the run page offers approve and reject with the request; the runs page has the view's tab", async () => {
    const h = harness();
    const { app, auth } = await setup(h, ["d1"]);
    const run = await (
      await app.fetch(new Request("http://localhost/runs/d1", { headers: auth }))
    ).text();
    expect(run).toContain('data-open="dialog-approve"');
    expect(run).toContain('data-open="dialog-reject"');
    expect(run).toContain('data-api="/api/runs/d1/approvals/{name}/approve"');
    expect(run).toContain('name="path.name" value="merge"');
    expect(run).toContain("+++ b/x\n-old\n+new");
    const runs = await (
      await app.fetch(new Request("http://localhost/?view=waiting-approval", { headers: auth }))
    ).text();
    expect(runs).toContain("Waiting for approval");
    expect(runs).toContain("d1");
  });
});

describe("the OpenAPI document", () => {
  it("marks approval-link operations as needing no token", async () => {
    const h = useHarness("sqlite")();
    const app = createHttpApp({ engine: h.engine([], { worker: false }), clock: h.clock });
    const doc = (await call<Json>(app.fetch, "GET", "/api/openapi.json")).body as {
      paths: Record<string, Record<string, Json>>;
    };
    const link = doc.paths["/api/approval-links/{token}"]!;
    for (const op of [link.get!, link.post!]) {
      expect(op.security).toEqual([]);
      expect(op["x-cairn-access"]).toBe("link");
    }
    expect(doc.paths["/api/runs/{id}/approvals/{name}/approve"]?.post?.["x-cairn-access"]).toBe(
      "act",
    );
    app.close();
  });
});
