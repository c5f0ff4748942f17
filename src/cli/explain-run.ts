// Why a run is where it is, in one line a person can act on: what a waiting run waits for
// and until when, which worker holds a running run and until when (or that none does:
// its lease was ended, see Store.expireLease), why a pending run is
// not picked up (no worker at all, or none serving its name@version), what paused it, and
// which worker holds a run released while a step body of it still ran there.
// Judged from the run and the workers' heartbeats; finished runs keep their own reason.

import { isRetryBackoffReason } from "../engine/views.js";
import {
  APPROVAL_EVENT_PREFIX,
  type Engine,
  type RunView,
  type StepView,
  type WorkerView,
} from "../index.js";
import { approvalKeys } from "../workflow/approval-calls.js";
import { CHILD_EVENT_PREFIX } from "../workflow/child-calls.js";
import { iso, printable, quoted, shellArg } from "./format.js";

/** One name a waiting run waits for (RunView.waitingFor), as a person reads it: an
 *  approval's by its name, a child's by its run id (cairn's own events, which nobody
 *  sends: "cairn.child:<id>" read as an event to send), an event's as it is. */
export function waitText(name: string): string {
  if (name.startsWith(APPROVAL_EVENT_PREFIX)) {
    return `approval ${quoted(name.slice(APPROVAL_EVENT_PREFIX.length))}`;
  }
  if (name.startsWith(CHILD_EVENT_PREFIX)) {
    return `child run ${quoted(name.slice(CHILD_EVENT_PREFIX.length))}`;
  }
  return quoted(name);
}

/** Whether explaining `run` needs the workers: a pending run (which worker picks it up), a
 *  running one held by no worker or whose lease ended (which worker takes it over). */
export function explainNeedsWorkers(run: RunView, now: Date): boolean {
  if (run.status === "pending") return true;
  if (run.status !== "running") return false;
  return !run.leaseOwner || (run.leaseUntil !== undefined && run.leaseUntil < now);
}

/** The suffix of the sleep cairn/ai's model wrapper takes when the shared rate limiter
 *  says to wait long (model-setup.ts: throttleName, "<call name>:throttled"). */
const THROTTLED = ":throttled";

/** Whether `run` sleeps (a ctx.sleep, or a model call throttled by the rate limiter): only
 *  its open calls tell which, read with sleepingCall. */
export function explainNeedsSleep(run: RunView): boolean {
  return (
    run.status === "waiting" &&
    run.wakeAt !== undefined &&
    (run.waitingFor ?? []).length === 0 &&
    !isRetryBackoffReason(run.reason)
  );
}

/** The model call whose rate-limit wait `steps` (a run's steps, or its open calls) sleep
 *  in: the name of its calls ("model:gpt-4o"), or undefined for any other sleep. */
export function throttledCall(steps: readonly StepView[]): string | undefined {
  const sleep = steps.find(
    (s) =>
      s.kind === "sleep" &&
      s.status === "waiting" &&
      s.name.endsWith(THROTTLED) &&
      s.name.length > THROTTLED.length,
  );
  return sleep?.name.slice(0, -THROTTLED.length);
}

/** For a sleeping run (explainNeedsSleep): the model call it waits for the rate limit of,
 *  read from its open calls only (the calls begun and not completed: a page past any
 *  position, costing those, not the journal). */
export async function sleepingThrottle(engine: Engine, run: RunView): Promise<string | undefined> {
  if (!explainNeedsSleep(run)) return undefined;
  const open = await engine.readSteps(run.id, { from: OPEN_CALLS_ONLY, limit: 1 });
  return throttledCall(open.steps);
}

/** A call position past any run's (SQL integer columns hold it): only open calls follow. */
const OPEN_CALLS_ONLY = 2_147_483_647;

/** What `call` ("model:gpt-4o", or the name given to ai.model()) says of its model. */
function throttledText(call: string): string {
  return call.startsWith("model:") && call.length > 6
    ? `model ${quoted(call.slice(6))}`
    : `model calls ${quoted(call)}`;
}

/** `lease: false` leaves a running run's lease out, and a run's hold, for a view that
 *  shows them on their own. `throttled`: the model call a sleeping run waits for the rate
 *  limit of (sleepingThrottle, throttledCall). */
export function explainRun(
  run: RunView,
  workers: readonly WorkerView[],
  now: Date,
  options: { lease?: boolean; throttled?: string | undefined } = {},
): string {
  const why = explainStatus(run, workers, now, options);
  if (options.lease === false) return why;
  // First: a long reason (a failed run's error) is cut short in a table.
  const held = heldText(run, now);
  return held === undefined ? why : why ? `${held}; ${why}` : held;
}

/** A hold still on (RunView.heldBy: a step body of the run still runs in that worker, and
 *  no other worker takes the run before then): which worker and until when; undefined when
 *  the run has none, or it has run out. */
function heldText(run: RunView, now: Date): string | undefined {
  if (!run.heldBy || !run.heldUntil || run.heldUntil.getTime() <= now.getTime()) return undefined;
  return `held by ${printable(run.heldBy)} until ${iso(run.heldUntil)}`;
}

function explainStatus(
  run: RunView,
  workers: readonly WorkerView[],
  now: Date,
  options: { lease?: boolean; throttled?: string | undefined },
): string {
  const ref = `${run.workflow}@${run.version}`;
  // A worker id is the caller's text: a line break in it (folded into a space by a table's
  // one-line cell) made it read as more of the explanation ("wrk_a\nrunning on wrk_b").
  const owner = run.leaseOwner === undefined ? "" : printable(run.leaseOwner);
  switch (run.status) {
    case "waiting": {
      const names = run.waitingFor ?? [];
      const until = run.wakeAt ? ` until ${iso(run.wakeAt)}` : "";
      const approvals = approvalKeys(names).map(quoted);
      // A parent awaiting ctx.child waits for the event "cairn.child:<child id>": cairn's
      // own, which nobody sends; it was shown as an event to send.
      const children = names
        .filter((n) => n.startsWith(CHILD_EVENT_PREFIX))
        .map((n) => quoted(n.slice(CHILD_EVENT_PREFIX.length)));
      const events = names
        .filter((n) => !n.startsWith(APPROVAL_EVENT_PREFIX) && !n.startsWith(CHILD_EVENT_PREFIX))
        .map(quoted);
      const parts: string[] = [];
      if (approvals.length > 0) parts.push(`approval ${approvals.join(", ")}`);
      if (children.length > 0) parts.push(`child run ${children.join(", ")}`);
      if (events.length > 0) parts.push(`event ${events.join(", ")}`);
      if (parts.length > 0) return `waiting for ${parts.join(" or ")}${until}`;
      // A step waiting to try again (its backoff released the run) is no ctx.sleep.
      if (run.wakeAt && isRetryBackoffReason(run.reason)) return printable(run.reason!);
      // cairn/ai's shared rate limiter asked for a long wait: it read as a ctx.sleep.
      if (run.wakeAt && options.throttled !== undefined) {
        return `waiting for the rate limit of ${throttledText(options.throttled)} (requests or tokens per minute, shared by all workers) until ${iso(run.wakeAt)}`;
      }
      return run.wakeAt ? `sleeping until ${iso(run.wakeAt)}` : (run.reason ?? "waiting");
    }
    case "running": {
      if (!run.leaseOwner) {
        // Its worker ended its lease (Store.expireLease) to keep a crash for its next
        // claimer to charge: nothing executes it until a worker serving it claims it.
        const given = "running, held by no worker (its last one gave it up)";
        const live = workers.filter((w) => w.live);
        if (live.length === 0) return `${given}: no worker is running`;
        const serving = live.filter((w) => w.workflows.includes(ref));
        if (serving.length === 0) return `${given}: no live worker serves ${ref}`;
        return `${given}: the next of ${serving.length} live worker(s) serving ${ref} takes it over`;
      }
      // The request is stored (the run's reason is the cancel's); until its worker hears of
      // it at its next heartbeat, "running on" read as if no cancel had been asked.
      const doing = run.cancelRequested
        ? `cancel requested${run.reason === undefined ? "" : ` (reason ${quoted(run.reason)})`}, waiting for worker ${owner} to stop it`
        : `running on ${owner}`;
      if (options.lease === false) return doing;
      const until = run.leaseUntil;
      if (until && until.getTime() < now.getTime()) {
        // A cancel asked of it is not lost: whoever takes it over (or its owner handing it
        // back) ends it canceled.
        const ended = run.cancelRequested
          ? `cancel requested${run.reason === undefined ? "" : ` (reason ${quoted(run.reason)})`} of a run on ${owner}, whose lease ended ${iso(until)}`
          : `running on ${owner}, whose lease ended ${iso(until)}`;
        const live = workers.filter((w) => w.live);
        if (live.some((w) => w.id !== run.leaseOwner && w.workflows.includes(ref))) {
          return `${ended}: another worker takes it over`;
        }
        // No other worker will: a live owner keeps a run while a step body of it still runs
        // there (worker.ts), and hands it back after.
        if (live.some((w) => w.id === run.leaseOwner)) {
          return `${ended}: that worker, still live, hands it back once no step body of it runs there (no other live worker serves ${ref})`;
        }
        return `${ended}: no live worker serves ${ref}; the next one to serve it takes it over`;
      }
      return `${doing}${until ? ` (lease until ${iso(until)})` : ""}`;
    }
    case "pending": {
      const live = workers.filter((w) => w.live);
      if (live.length === 0) return "pending: no worker is running";
      const serving = live.filter((w) => w.workflows.includes(ref));
      if (serving.length === 0) return `pending: no live worker serves ${ref}`;
      return `pending: ready for ${serving.length} live worker(s) serving ${ref}`;
    }
    case "paused":
      if (run.pausedFor === "budget") {
        const spent = (run.reason ?? "over a limit").replace(/^budget: /, "");
        return `paused for budget: ${spent} (raise it: cairn resume ${shellArg(run.id)} --budget name=amount)`;
      }
      if (run.pausedFor === "version")
        return `paused: ${run.reason ?? `no live worker serves ${ref}`}`;
      return `paused${run.reason ? `: ${run.reason}` : ""}`;
    default:
      return run.reason ?? (run.error ? `${run.error.name}: ${run.error.message}` : "");
  }
}

/** A warning when no live worker serves the run's name@version: which versions of its name
 *  live workers do serve, if any. Undefined when one serves it. For `cairn start`, `fork`,
 *  `resume`, and before `cairn result --wait` waits (any unfinished run). */
export function unservedWarning(run: RunView, workers: readonly WorkerView[]): string | undefined {
  const ref = `${run.workflow}@${run.version}`;
  const live = workers.filter((w) => w.live);
  if (live.some((w) => w.workflows.includes(ref))) return undefined;
  const others = [
    ...new Set(live.flatMap((w) => w.workflows.filter((f) => f.startsWith(`${run.workflow}@`)))),
  ].sort();
  const served =
    live.length === 0
      ? "no worker is running"
      : others.length > 0
        ? `no live worker serves ${printable(ref)} (they serve ${others.map(printable).join(", ")})`
        : `no live worker serves ${printable(ref)}`;
  const stays = run.status === "pending" ? "stays pending" : `is ${run.status} and goes no further`;
  return `cairn: warning: ${served}; run ${quoted(run.id)} ${stays} until a worker serving ${printable(ref)} runs`;
}
