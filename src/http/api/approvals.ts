// Approvals (ctx.approval) over HTTP: a run's approvals; approve and reject (the "act"
// role); and approval links: a signed, single-use, expiring token in the path answers one
// approval one way without any other credential (security.ts lets these paths through).
// A forged, altered, expired or replayed token is refused and nothing changes.

import { checkComment } from "../../engine/approval-answer.js";
import type { ApprovalView } from "../../index.js";
import { APPROVAL_LINK_API } from "../approval-link-paths.js";
import { putApprovalWithheld, toJsonValue } from "../json.js";
import { s } from "../schema.js";
import { ref } from "./models.js";
import { refusePlainTextInto } from "./plain-text.js";
import { engineCheck, json, type Route, route } from "./route.js";
import { RUN_ID_PARAM } from "./runs.js";

export function approvalJson(a: ApprovalView): Record<string, unknown> {
  const out: Record<string, unknown> = {
    runId: a.runId,
    key: a.key,
    name: a.name,
    request: toJsonValue(a.request),
    requestedAt: a.requestedAt.toISOString(),
    onTimeout: a.onTimeout,
    status: a.status,
  };
  if (a.deadline) out.deadline = a.deadline.toISOString();
  if (a.answeredAt) out.answeredAt = a.answeredAt.toISOString();
  if (a.answeredBy !== undefined) out.answeredBy = a.answeredBy;
  if (a.comment !== undefined) out.comment = a.comment;
  if (a.answer !== undefined) out.answer = toJsonValue(a.answer);
  if (a.via !== undefined) out.via = a.via;
  if (a.linkId !== undefined) out.linkId = a.linkId;
  putApprovalWithheld(out, a);
  return out;
}

const NAME_PARAM = {
  name: {
    schema: s.string({ minLength: 1, maxLength: 220 }),
    description: 'The approval\'s name (as given to ctx.approval) or key ("review#2").',
  },
};

const TOKEN_PARAM = {
  token: {
    schema: s.string({ minLength: 10, maxLength: 2_000 }),
    description: "The approval link's token (the last segment of the link).",
  },
};

const answerBody = s.object({
  by: s.string({ minLength: 1, maxLength: 200, description: 'Who answers (default "api").' }),
  comment: s.string({ minLength: 1, maxLength: 4_000, description: "Why." }),
  answer: s.any({ description: "Structured answer data (the approval's answer schema)." }),
  via: s.enum(["api", "dashboard"] as const, { description: 'Default "api".' }),
});

const approvalAnswer = { schema: s.object({ approval: ref.Approval }, ["approval"]) };

const listApprovals = route({
  method: "get",
  path: "/runs/{id}/approvals",
  operationId: "listApprovals",
  summary: "A run's approvals: each request, its state and its answer",
  tag: "approvals",
  access: "read",
  params: RUN_ID_PARAM,
  errors: [404],
  responses: {
    200: {
      description: "In the order the run asked.",
      schema: s.object({ approvals: s.array(ref.Approval) }, ["approvals"]),
    },
  },
  async handle({ c, params, deps }) {
    const list = await deps.engine.listApprovals(params.id!);
    return json(c, 200, { approvals: list.map(approvalJson) });
  },
});

function answerRoute(decision: "approve" | "reject"): Route {
  return route({
    method: "post",
    path: `/runs/{id}/approvals/{name}/${decision}`,
    operationId: `${decision}Approval`,
    summary: `${decision === "approve" ? "Approve" : "Reject"} an approval the run waits for`,
    description:
      "Records who answered (body.by), when, and why (body.comment); the run continues. An " +
      "approval is answered once: answering it again, after its deadline or for a finished " +
      "run is a 409 and changes nothing.",
    tag: "approvals",
    access: "act",
    params: { ...RUN_ID_PARAM, ...NAME_PARAM },
    body: { schema: answerBody, required: false, description: "Optional: who, why, data." },
    errors: [404, 409],
    responses: { 200: { description: "The approval, answered.", ...approvalAnswer } },
    async handle({ c, params, body, deps }) {
      const b = body ?? {};
      const options = {
        by: b.by ?? b.via ?? "api",
        via: b.via ?? "api",
        ...(b.comment !== undefined ? { comment: b.comment } : {}),
        ...(b.answer !== undefined ? { answer: b.answer } : {}),
      };
      if (b.comment !== undefined) {
        engineCheck(() => checkComment(b.comment, params.id!, params.name!));
      }
      if (b.comment !== undefined || b.answer !== undefined) {
        await refusePlainTextInto(deps.engine, params.id!, "the comment or answer");
      }
      const view =
        decision === "approve"
          ? await deps.engine.approve(params.id!, params.name!, options)
          : await deps.engine.reject(params.id!, params.name!, options);
      return json(c, 200, { approval: approvalJson(view) });
    },
  });
}

const inspectLink = route({
  method: "get",
  path: `${APPROVAL_LINK_API}/{token}`,
  operationId: "inspectApprovalLink",
  summary: "What an approval link would do, and the approval it answers (changes nothing)",
  description: "Needs no bearer token: the link's signed token is the credential.",
  tag: "approvals",
  access: "link",
  params: TOKEN_PARAM,
  errors: [404],
  responses: {
    200: {
      description: "The link's decision and expiry, and the approval.",
      schema: s.object(
        {
          decision: s.enum(["approve", "reject"] as const),
          expiresAt: s.string({ format: "date-time" }),
          by: s.string({ description: "Whom the link was made for." }),
          approval: ref.Approval,
        },
        ["decision", "expiresAt", "approval"],
      ),
    },
  },
  async handle({ c, params, deps }) {
    const info = await deps.engine.inspectApprovalLink(params.token!);
    return json(c, 200, {
      decision: info.decision,
      expiresAt: info.expiresAt.toISOString(),
      ...(info.by !== undefined ? { by: info.by } : {}),
      approval: approvalJson(info.approval),
    });
  },
});

const answerLink = route({
  method: "post",
  path: `${APPROVAL_LINK_API}/{token}`,
  operationId: "answerApprovalLink",
  summary: "Answer an approval with a link (single use)",
  description:
    "Needs no bearer token: the link's signed token is the credential. It answers one " +
    "approval one way, once: a forged, altered or expired token is a 403, a used one (or an " +
    "approval answered otherwise, timed out, or of a finished run) a 409; nothing changes.",
  tag: "approvals",
  access: "link",
  params: TOKEN_PARAM,
  body: {
    schema: s.object({ comment: s.string({ minLength: 1, maxLength: 4_000 }) }),
    required: false,
    description: "Optional: why.",
  },
  errors: [404, 409],
  responses: { 200: { description: "The approval, answered.", ...approvalAnswer } },
  async handle({ c, params, body, deps }) {
    if (body?.comment !== undefined) {
      const { approval } = await deps.engine.inspectApprovalLink(params.token!);
      engineCheck(() => checkComment(body.comment, approval.runId, approval.key));
      await refusePlainTextInto(deps.engine, approval.runId, "the comment");
    }
    const view = await deps.engine.answerApprovalLink(
      params.token!,
      body?.comment !== undefined ? { comment: body.comment } : {},
    );
    return json(c, 200, { approval: approvalJson(view) });
  },
});

export const approvalRoutes: Route[] = [
  listApprovals,
  answerRoute("approve"),
  answerRoute("reject"),
  inspectLink,
  answerLink,
];
