// The run after a client acted on it (cancel, resume, an event), for what the client shows.
// The action is done: a payload under a key this process was not given must not turn it
// into a reported failure (the user would do it again: a second event, a second cancel).
// The run then comes as a listing shows it, such payloads as EncryptedValue.

import { PayloadKeyError, RunConflictError } from "../errors.js";
import type { Engine } from "./engine.js";
import { runCursorWalk } from "./run-cursor.js";
import type { RunView } from "./views.js";

/** Run `id` as getRun shows it, or as a listing does when getRun refuses a payload's key. */
export async function runAfter(engine: Engine, id: string): Promise<RunView | undefined> {
  try {
    return await engine.getRun(id);
  } catch (err) {
    if (!(err instanceof PayloadKeyError)) throw err;
  }
  const cursor = runCursorWalk(`the run list searched for run ${JSON.stringify(id.slice(0, 80))}`);
  for (;;) {
    const before = cursor.before;
    const page = await engine.listRuns({ idContains: id, limit: 200, ...(before && { before }) });
    const run = page.find((r) => r.id === id);
    const last = page[page.length - 1];
    if (run || page.length < 200 || !last) return run;
    cursor.advance({ createdAt: last.createdAt.getTime(), id: last.id });
  }
}

/** After a cancel the store accepted for a run executing elsewhere: the run read afterwards
 *  completed or failed, its worker having ended it before it heard of the cancel. Nothing
 *  was canceled; a client must not report the cancel as requested (a finished run cannot be
 *  canceled). Undefined when the run is canceled or still unfinished (its worker stops it). */
export function cancelTooLate(run: RunView | undefined, id: string): RunConflictError | undefined {
  if (run?.status !== "completed" && run?.status !== "failed") return undefined;
  return new RunConflictError(
    `Run "${id}" ${run.status} before its worker heard of the cancel; it was not canceled (a finished run cannot be canceled)`,
  );
}

/** How a client writes a caller's text (`quote`: a reason, a run id) and a worker's id
 *  (`worker`) in its messages: the CLI and the HTTP API each have their own escaping. */
export interface MessageQuoting {
  quote: (text: string) => string;
  worker: (id: string) => string;
}

/** What an earlier cancel did to `run` as read before this one, in words (`cairn cancel` and
 *  the HTTP API say it alike): canceled it (when, why), or asked its worker to stop it; and
 *  the reason it keeps. Undefined when no cancel came before. */
export function earlierCancel(
  run: RunView | undefined,
  q: MessageQuoting,
): { text: string; reason?: string } | undefined {
  if (run === undefined) return undefined;
  const why = run.reason === undefined ? "" : ` (reason ${q.quote(run.reason)})`;
  let text: string;
  if (run.status === "canceled") {
    text = `Run ${q.quote(run.id)} was already canceled at ${run.updatedAt.toISOString()}${why}`;
  } else if (run.status === "running" && run.cancelRequested) {
    const worker =
      run.leaseOwner === undefined ? "its worker" : `worker ${q.worker(run.leaseOwner)}`;
    text = `Cancel of run ${q.quote(run.id)} was already requested${why}, waiting for ${worker} to stop it`;
  } else {
    return undefined;
  }
  return run.reason === undefined ? { text } : { text, reason: run.reason };
}

/** A repeat cancel's refusal: it gave a reason other than the one the run keeps. Undefined
 *  when it gave none, or the same. */
export function reasonNotRecorded(
  earlier: { text: string; reason?: string } | undefined,
  reason: string | undefined,
  q: MessageQuoting,
): string | undefined {
  if (earlier === undefined || reason === undefined || reason === earlier.reason) return undefined;
  return `${earlier.text}; the reason ${q.quote(reason)} was not recorded (a run keeps the reason it was first canceled with)`;
}

/** The earlier cancel of a run, judged from its reads before and after this client's cancel:
 *  the one read before (earlierCancel), or, when another client's cancel landed between that
 *  read and this one, the run as read after, if it keeps a reason other than the one this
 *  client gave (its reason was not recorded: the store keeps the first). A cancel without a
 *  reason cannot tell another client's cancel from its own: it is answered as its own. */
export function earlierCancelAround(
  before: RunView | undefined,
  after: RunView | undefined,
  reason: string | undefined,
  q: MessageQuoting,
): { text: string; reason?: string } | undefined {
  const earlier = earlierCancel(before, q);
  if (earlier !== undefined || reason === undefined || after?.reason === reason) return earlier;
  return earlierCancel(after, q);
}
