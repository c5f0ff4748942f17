// Acting on a run: send it an event, cancel it, resume it (with a raised budget), fork it
// from a step. Each needs the "act" role.

import {
  cancelTooLate,
  earlierCancelAround,
  reasonNotRecorded,
  runAfter,
} from "../../engine/run-after.js";
import {
  checkBudget,
  checkCancelReason,
  checkEventName,
  checkRunId,
} from "../../engine/validate.js";
import { runNotFound } from "../../errors.js";
import type { Engine } from "../../index.js";
import { isWorkflowName } from "../../workflow/define.js";
import { HttpError, quote } from "../errors.js";
import { eventJson, runJson } from "../json.js";
import { s } from "../schema.js";
import { ref } from "./models.js";
import { refusePlainTextInto } from "./plain-text.js";
import { engineCheck, json, type Route, route } from "./route.js";
import { mustGetRun, RUN_ID_PARAM } from "./runs.js";

const sendEvent = route({
  method: "post",
  path: "/runs/{id}/events/{name}",
  operationId: "sendEvent",
  summary: "Send an event to a run (the webhook path)",
  description:
    "The request body, any JSON, is the event's payload (no body: no payload). An event " +
    "sent before the run waits for it is kept and delivered then. With an Idempotency-Key " +
    "header the send is idempotent: the same key again stores nothing and answers the " +
    "first event (200, duplicate true); the same key with another name or payload is a 409.",
  tag: "actions",
  access: "act",
  params: {
    ...RUN_ID_PARAM,
    name: {
      schema: s.string({ minLength: 1, maxLength: 200 }),
      description: 'The event name (not starting with "cairn.").',
    },
  },
  headers: {
    "idempotency-key": {
      schema: s.string({ minLength: 1, maxLength: 256 }),
      description:
        "Makes the send idempotent, e.g. a webhook's delivery id. Printable ASCII (else 400).",
    },
  },
  body: { schema: s.any(), required: false, description: "The payload (any JSON)." },
  errors: [404, 409],
  responses: {
    201: {
      description: "The event was stored.",
      schema: s.object({ event: ref.Event, duplicate: s.boolean() }, ["event", "duplicate"]),
    },
    200: {
      description: "An event with this idempotency key was stored before; nothing changed.",
      schema: s.object({ event: ref.Event, duplicate: s.boolean() }, ["event", "duplicate"]),
    },
  },
  async handle({ c, params, query, body, deps }) {
    const name = params.name!;
    if (name.startsWith("cairn.")) {
      throw new HttpError(400, "VALIDATION", 'Event names starting with "cairn." are reserved');
    }
    engineCheck(() => checkEventName(name, params.id!));
    const key = query["idempotency-key"] as string | undefined;
    if (body !== undefined) {
      await refusePlainTextInto(deps.engine, params.id!, `the payload of event ${quote(name)}`);
    }
    const sent = await deps.engine.sendEvent(
      params.id!,
      name,
      body,
      key === undefined ? {} : { idempotencyKey: key },
    );
    return json(c, sent.duplicate ? 200 : 201, {
      event: eventJson(sent.event),
      duplicate: sent.duplicate,
    });
  },
});

const cancelRun = route({
  method: "post",
  path: "/runs/{id}/cancel",
  operationId: "cancelRun",
  summary: "Cancel a run",
  description:
    "A run that is not executing is canceled at once (state canceled); one that is executing " +
    "is stopped by its worker within a heartbeat (state requested). A finished run, also one " +
    "that completed or failed before its worker heard of the cancel, is a 409. A run canceled " +
    "already, or whose cancel was requested already, keeps the reason it was first given: " +
    "without a reason or with that one the answer is 200 with `already` true (nothing " +
    "changed); another reason is a 409 CANCEL_REASON_NOT_RECORDED saying so. `message` says " +
    "what happened in words.",
  tag: "actions",
  access: "act",
  params: RUN_ID_PARAM,
  body: {
    schema: s.object({ reason: s.string({ minLength: 1, maxLength: 500 }) }),
    required: false,
    description: "Optional: the reason recorded on the run.",
  },
  errors: [404, 409],
  responses: {
    200: {
      description: "Canceled, or cancel requested (by this request, or `already` before it).",
      schema: s.object(
        {
          run: ref.Run,
          state: s.enum(["canceled", "requested"] as const),
          already: s.boolean({
            description:
              "true: the run was canceled, or its cancel requested, before this request; nothing changed and it keeps its first reason.",
          }),
          message: s.string({ description: "What happened, in words (the dashboard shows it)." }),
        },
        ["run", "state", "already", "message"],
      ),
    },
  },
  async handle({ c, params, body, deps }) {
    const id = params.id!;
    const reason = body?.reason;
    if (reason !== undefined) {
      engineCheck(() => checkCancelReason(reason, id));
      await refusePlainTextInto(deps.engine, id, "the reason");
    }
    // Read first: the store keeps the first reason of a run canceled (or asked to be)
    // already, and answers a repeat as it answered the first (it cancels the run's children
    // left unfinished again).
    const before = await runAfter(deps.engine, id);
    await deps.engine.cancel(id, reason);
    const run = await mustGetRunAfter(deps.engine, id);
    // Requested, but its worker ended the run otherwise before it heard: not canceled.
    const tooLate = cancelTooLate(run, id);
    if (tooLate) throw tooLate;
    const earlier = earlierCancelAround(before, run, reason, QUOTING);
    const refused = reasonNotRecorded(earlier, reason, QUOTING);
    if (refused !== undefined) throw new HttpError(409, "CANCEL_REASON_NOT_RECORDED", refused);
    const state = run.status === "canceled" ? "canceled" : "requested";
    return json(c, 200, {
      run: runJson(run),
      state,
      already: earlier !== undefined,
      message:
        earlier !== undefined
          ? `${earlier.text}; nothing changed.`
          : state === "canceled"
            ? `Canceled run ${quote(id)}.`
            : `Cancel of run ${quote(id)} requested; the worker executing it stops it shortly.`,
    });
  },
});

/** The quoting of the API's messages (`quote`: JSON, at most 80 characters shown). */
const QUOTING = { quote: (text: string) => quote(text), worker: (id: string) => quote(id) };

const resumeRun = route({
  method: "post",
  path: "/runs/{id}/resume",
  operationId: "resumeRun",
  summary: "Resume a paused or failed run, optionally with raised budget limits",
  description:
    "Only a paused or failed run resumes (else 409), and not a child whose parent run was " +
    "canceled (409 naming the parent: it would work for nobody).",
  tag: "actions",
  access: "act",
  params: RUN_ID_PARAM,
  body: {
    schema: s.object({
      budget: s.record(s.number({ minimum: 0 }), {
        description: 'Limits to set (others unchanged), e.g. {"usd": 10}.',
        maxProperties: 50,
      }),
    }),
    required: false,
    description: "Optional: new budget limits.",
  },
  errors: [404, 409],
  responses: {
    200: { description: "The run, now pending.", schema: s.object({ run: ref.Run }, ["run"]) },
  },
  async handle({ c, params, body, deps }) {
    engineCheck(() => checkBudget(body?.budget, "resume()"));
    await deps.engine.resume(params.id!, body?.budget ? { budget: body.budget } : {});
    return json(c, 200, { run: runJson(await mustGetRunAfter(deps.engine, params.id!)) });
  },
});

/** The run after acting on it (engine/run-after.ts: a payload under a key this server lacks
 *  must not answer 503 for a cancel or resume that was done), or a 404 naming the id. */
async function mustGetRunAfter(engine: Engine, id: string) {
  const run = await runAfter(engine, id);
  if (!run) throw runNotFound(id);
  return run;
}

const forkRun = route({
  method: "post",
  path: "/runs/{id}/fork",
  operationId: "forkRun",
  summary: "Fork a run from one of its steps, optionally on another version",
  description:
    "A new run reuses the records before `fromStep` (a completed step's key) and executes " +
    "from there. The forked run is not touched.",
  tag: "actions",
  access: "act",
  params: RUN_ID_PARAM,
  body: {
    schema: s.object(
      {
        fromStep: s.string({
          minLength: 1,
          maxLength: 300,
          description: "A completed step's key.",
        }),
        version: s.string({ minLength: 1, maxLength: 128, description: "Default: the same." }),
        id: s.string({ minLength: 1, maxLength: 256, description: "The new run's id." }),
      },
      ["fromStep"],
    ),
    required: true,
    description: "Where to fork from.",
  },
  errors: [404, 409],
  responses: {
    201: { description: "The new run.", schema: s.object({ run: ref.Run }, ["run"]) },
  },
  async handle({ c, params, body, deps }) {
    const b = body!;
    engineCheck(() => {
      if (b.id !== undefined) checkRunId(b.id, "fork()");
      if (b.version !== undefined && !isWorkflowName(b.version)) {
        throw new TypeError(
          `fork(): version ${quote(b.version)} is invalid; versions are 1-128 letters, digits and . _ : / - (not starting with a symbol)`,
        );
      }
    });
    const handle = await deps.engine.fork(params.id!, {
      fromStep: b.fromStep,
      ...(b.version !== undefined ? { version: b.version } : {}),
      ...(b.id !== undefined ? { id: b.id } : {}),
    });
    return json(c, 201, { run: runJson(await mustGetRun(deps.engine, handle.id)) });
  },
});

export const actionRoutes: Route[] = [sendEvent, cancelRun, resumeRun, forkRun];
