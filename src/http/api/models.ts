// The shapes the API answers with, as named schemas (#/components/schemas). json.ts builds
// the values; test/http-openapi.test.ts checks real answers against these.

import { type JsonSchema, type Schema, s } from "../schema.js";

const RUN_STATUSES = [
  "pending",
  "running",
  "waiting",
  "paused",
  "completed",
  "failed",
  "canceled",
] as const;

export { RUN_STATUSES };

const dateTime = (description: string) => s.string({ format: "date-time", description });

const Amounts = s.record(s.number(), {
  description: 'Named amounts, e.g. {"usd": 0.42, "tokens": 1200}.',
});

const ErrorRecord = s.object(
  {
    name: s.string(),
    code: s.string({ description: "A cairn error code, when there is one." }),
    message: s.string(),
    stack: s.string(),
    withheld: withheldOf(["message", "stack"]),
  },
  ["name", "message"],
);

const Value = s.any({
  description:
    "A stored value as JSON: Dates as ISO strings, bigints as decimal strings, Maps as objects " +
    "(or [key, value] pairs), Sets and typed arrays as arrays, Errors as {name, message}, " +
    'NaN and ±Infinity as strings, a repeated reference as "[Circular]", and a value the ' +
    'codec cannot decode as "[undecodable value]" (never its stored text); the record\'s ' +
    "`withheld` field names such a value (and one encrypted with a key the server lacks).",
});

/** The `withheld` field of a record holding stored values: which of them are not shown. */
function withheldOf(fields: string[]) {
  const why = s.ref("Withheld");
  return s.object(Object.fromEntries(fields.map((f) => [f, why])), [], {
    description:
      "The values (or text) of this record that are not shown, and why: their JSON is a placeholder " +
      'text (`"[encrypted with key "<id>"]"`, `"[undecodable value]"`) that a stored string ' +
      "may hold too; only a field named here is withheld.",
  });
}

const Withheld = s.object(
  {
    reason: s.enum(["encrypted", "undecodable"] as const, {
      description:
        "encrypted: with a key this server was not given; undecodable: the codec cannot read it.",
    }),
    keyId: s.string({ description: "The key it is encrypted with (reason encrypted)." }),
  },
  ["reason"],
);

const runFields = {
  id: s.string(),
  workflow: s.string(),
  version: s.string(),
  status: s.enum(RUN_STATUSES),
  reason: s.string({ description: "Why the run is paused, failed, canceled or not progressing." }),
  pausedFor: s.enum(["budget", "version"] as const, {
    description: "budget: over its budget; version: no live worker has its workflow@version.",
  }),
  error: s.ref("ErrorRecord"),
  budget: s.object(
    {
      limit: s.ref("Amounts"),
      spent: s.ref("Amounts"),
      defaultsUnknown: s.boolean({
        description:
          "true: the server does not have the workflow's code, so a name without a limit here may have one by the workflow's default budget.",
      }),
    },
    ["limit", "spent"],
  ),
  parentId: s.string(),
  wakeAt: dateTime("A waiting run's timer (sleep end or wait timeout)."),
  waitingFor: s.array(s.string(), { description: "Event names a waiting run waits for." }),
  cancelRequested: s.boolean({
    description:
      "A running run: a cancel was requested and its worker has not stopped it yet (within one heartbeat); reason is the cancel's. Absent otherwise.",
  }),
  heldBy: s.string({
    description:
      "A run released while a step body of it still ran in its worker: that worker, which alone may claim the run until heldUntil.",
  }),
  heldUntil: dateTime(
    "Until when no worker but heldBy claims the run (renewed while the body runs, ended when it ends); past: the hold has run out.",
  ),
  createdAt: dateTime("When the run was created."),
  updatedAt: dateTime("When the run's row last changed."),
  withheld: withheldOf(["reason"]),
};
const runRequired = [
  "id",
  "workflow",
  "version",
  "status",
  "budget",
  "createdAt",
  "updatedAt",
] as const;

const RunSummary = s.object(runFields, runRequired, {
  description: "A run without its input and output (lists).",
});

const Run = s.object(
  {
    ...runFields,
    input: s.ref("Value"),
    output: s.ref("Value"),
    withheld: withheldOf(["input", "output", "reason"]),
  },
  runRequired,
);

const Attempt = s.object(
  {
    attempt: s.integer({ minimum: 1 }),
    startedAt: dateTime("When the attempt started."),
    endedAt: dateTime("When it ended."),
    error: s.ref("ErrorRecord"),
    spend: s.ref("Amounts"),
    retryAt: dateTime("When the next attempt may start."),
  },
  ["attempt", "startedAt", "spend"],
);

const Step = s.object(
  {
    key: s.string({ description: "Unique in its run: name, name#2, ..." }),
    name: s.string(),
    kind: s.enum([
      "step",
      "effect",
      "sleep",
      "wait",
      "child",
      "now",
      "random",
      "uuid",
      "approval",
    ] as const),
    status: s.enum(["completed", "failed", "retrying", "started", "waiting"] as const),
    result: s.ref("Value"),
    error: s.ref("ErrorRecord"),
    attempts: s.array(s.ref("Attempt")),
    spend: s.ref("Amounts"),
    startedAt: dateTime("When the first attempt (or the wait) started."),
    completedAt: dateTime("When the call completed."),
    intentAt: dateTime("When the call was begun durably (effects, sleeps, waits, children)."),
    withheld: withheldOf(["result"]),
  },
  ["key", "name", "kind", "status", "attempts", "spend", "startedAt"],
);

const Event = s.object(
  {
    seq: s.integer({ description: "Increasing in the order events were sent." }),
    name: s.string(),
    payload: s.ref("Value"),
    sentAt: dateTime("When it was stored."),
    consumedBy: s.string({ description: "The key of the wait that consumed it." }),
    idempotencyKey: s.string(),
    withheld: withheldOf(["payload"]),
  },
  ["seq", "name", "payload", "sentAt"],
);

const Worker = s.object(
  {
    id: s.string(),
    host: s.string(),
    pid: s.integer(),
    workflows: s.array(s.string(), { description: '"name@version" pairs it executes.' }),
    startedAt: dateTime("When it registered."),
    heartbeatAt: dateTime("Its last heartbeat."),
    live: s.boolean({ description: "Its heartbeat is recent: it counts for version pinning." }),
  },
  ["id", "host", "pid", "workflows", "startedAt", "heartbeatAt", "live"],
);

const WorkflowInfo = s.object(
  {
    id: s.string({ description: "name@version" }),
    name: s.string(),
    version: s.string(),
    validatesInput: s.boolean({ description: "It has an input schema (invalid input: 400)." }),
    budget: s.ref("Amounts"),
  },
  ["id", "name", "version", "validatesInput"],
);

const Approval = s.object(
  {
    runId: s.string(),
    key: s.string({ description: 'The call\'s key in its run: "review", "review#2", ...' }),
    name: s.string(),
    request: s.ref("Value"),
    requestedAt: dateTime("When the run asked."),
    deadline: dateTime("When it times out, if it does."),
    onTimeout: s.enum(["approve", "reject"] as const, {
      description: "The decision the run takes when the deadline passes.",
    }),
    status: s.enum(["pending", "approved", "rejected", "timed-out", "closed"] as const, {
      description:
        "timed-out: the deadline passed unanswered (the run takes onTimeout); closed: the run finished unanswered.",
    }),
    answeredAt: dateTime("When it was answered."),
    answeredBy: s.string({ description: "Who answered, as the answering client stated it." }),
    comment: s.string(),
    answer: s.ref("Value"),
    via: s.string({ description: '"cli", "api", "dashboard", "link", "engine".' }),
    linkId: s.string({ description: "The id of the approval link that answered it." }),
    withheld: withheldOf(["request", "answer", "comment"]),
  },
  ["runId", "key", "name", "request", "requestedAt", "onTimeout", "status"],
);

const Checkpoint = s.object(
  {
    workspace: s.string({ description: "The workspace's name (ctx.workspace(name))." }),
    step: s.string({
      description: 'The key of the step that recorded it; "workspace:<name>" for the base.',
    }),
    checkpoint: s.string({ description: "Content hash of the root directory (64 hex digits)." }),
    previous: s.string({
      description: "The checkpoint this step started from (not for the base).",
    }),
    changes: s.object(
      { added: s.integer(), modified: s.integer(), deleted: s.integer() },
      ["added", "modified", "deleted"],
      { description: "Files this step added, modified and deleted (not for the base)." },
    ),
    files: s.integer({ description: "Files in the base checkpoint." }),
    bytes: s.integer({ description: "Bytes of content the checkpoint added for this run." }),
    recordedAt: dateTime("When the step's record was written."),
  },
  ["workspace", "step", "checkpoint", "bytes", "recordedAt"],
);

const Workspace = s.object(
  {
    name: s.string(),
    checkpoints: s.array(s.ref("Checkpoint"), { description: "In call order, the base first." }),
  },
  ["name", "checkpoints"],
);

const CheckpointEntry = s.object(
  {
    path: s.string({ description: 'Relative to the workspace, "/"-separated: "src/a.ts".' }),
    type: s.enum(["file", "dir", "symlink"] as const),
    mode: s.integer({ description: "File mode bits (files and directories)." }),
    size: s.integer({ description: "A file's size in bytes." }),
    hash: s.string({ description: "A file's content hash." }),
    target: s.string({ description: "A symlink's target." }),
  },
  ["path", "type"],
);

const CheckpointChange = s.object(
  {
    path: s.string(),
    change: s.enum(["added", "modified", "deleted"] as const),
    before: s.ref("CheckpointEntry"),
    after: s.ref("CheckpointEntry"),
  },
  ["path", "change"],
);

const FileDiff = s.object(
  {
    path: s.string(),
    binary: s.boolean({ description: "One side is not UTF-8 text: no line diff." }),
    tooLarge: s.boolean({ description: "Too large or too different for a line diff here." }),
    hunks: s.array(
      s.object(
        {
          oldStart: s.integer(),
          oldLines: s.integer(),
          newStart: s.integer(),
          newLines: s.integer(),
          lines: s.array(s.string(), { description: 'Each starts with " ", "-" or "+".' }),
        },
        ["oldStart", "oldLines", "newStart", "newLines", "lines"],
      ),
    ),
  },
  ["path", "binary", "tooLarge", "hunks"],
);

const WorkspaceFile = s.object(
  {
    path: s.string(),
    mode: s.integer(),
    size: s.integer({ description: "Bytes." }),
    hash: s.string({ description: "Content hash (checked when read from the store)." }),
    encoding: s.enum(["utf8", "base64"] as const, {
      description: "utf8: the content is the text; base64: the file is not UTF-8 text.",
    }),
    content: s.string(),
  },
  ["path", "mode", "size", "hash", "encoding", "content"],
);

const StreamChunk = s.object(
  {
    offset: s.integer({ description: "Position in the run's stream, from 0." }),
    call: s.string({ description: "The model call (stable across its attempts)." }),
    name: s.string({ description: 'The call\'s name, e.g. "model:gpt-4o".' }),
    generation: s.integer({
      minimum: 0,
      description:
        "The run's generation whose execution streamed it (a resume of a failed run moves to the next, where attempts start again at 1).",
    }),
    attempt: s.integer({
      minimum: 1,
      description:
        "The attempt that streamed it. A later (generation, attempt) of a call replaces what an earlier one showed.",
    }),
    part: s.any({
      description:
        'An AI SDK stream part: {type: "text-delta", id, delta}, "reasoning-delta", "tool-call", "finish", ...',
    }),
  },
  ["offset", "call", "name", "generation", "attempt", "part"],
);

const ApiError = s.object(
  {
    error: s.object(
      {
        code: s.string({
          description:
            "RUN_NOT_FOUND, RUN_CONFLICT, CANCEL_REASON_NOT_RECORDED, UNKNOWN_WORKFLOW, INPUT_VALIDATION, SERIALIZATION, " +
            "APPROVAL_NOT_FOUND, APPROVAL_TOKEN, WORKSPACE_NOT_FOUND, WORKSPACE, LIMIT, PAYLOAD_KEY, " +
            "VALIDATION, UNAUTHORIZED, FORBIDDEN, FORBIDDEN_HOST, FORBIDDEN_ORIGIN, NOT_FOUND, " +
            "PAYLOAD_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE, STORE, INTERNAL",
        }),
        message: s.string(),
        issues: s.array(s.object({ path: s.string(), message: s.string() }, ["path", "message"])),
      },
      ["code", "message"],
    ),
  },
  ["error"],
);

/** Every named schema of the document. */
export const COMPONENTS: Record<string, Schema<unknown>> = {
  Amounts,
  ErrorRecord,
  Value,
  Withheld,
  RunSummary,
  Run,
  Attempt,
  Step,
  Event,
  Worker,
  WorkflowInfo,
  Approval,
  Checkpoint,
  Workspace,
  CheckpointEntry,
  CheckpointChange,
  FileDiff,
  WorkspaceFile,
  StreamChunk,
  Error: ApiError,
};

export const ref = {
  Amounts: s.ref("Amounts"),
  Run: s.ref("Run"),
  RunSummary: s.ref("RunSummary"),
  Step: s.ref("Step"),
  Event: s.ref("Event"),
  Worker: s.ref("Worker"),
  WorkflowInfo: s.ref("WorkflowInfo"),
  Approval: s.ref("Approval"),
  Workspace: s.ref("Workspace"),
  CheckpointEntry: s.ref("CheckpointEntry"),
  CheckpointChange: s.ref("CheckpointChange"),
  FileDiff: s.ref("FileDiff"),
  WorkspaceFile: s.ref("WorkspaceFile"),
  StreamChunk: s.ref("StreamChunk"),
  Value: s.ref("Value"),
  Error: s.ref("Error"),
};

export function resolveComponent(ref: string): JsonSchema | undefined {
  const name = ref.startsWith("#/components/schemas/")
    ? ref.slice("#/components/schemas/".length)
    : undefined;
  return name !== undefined && Object.hasOwn(COMPONENTS, name) ? COMPONENTS[name]?.json : undefined;
}
