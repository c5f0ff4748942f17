// Inspection's paged reads of a run's journal and events (readJournalPage, readEvents):
// each costs its page through the (run_id, seq) indexes, never a read of the whole run.

import { checkPageArguments, cutJournalPage } from "../journal-page.js";
import type { EventRecord, JournalPage, StepRecord } from "../store.js";
import {
  type AttemptRow,
  attemptFromRow,
  type EventRow,
  eventFromRow,
  type IntentRow,
  intentFromRow,
  STEP_SELECT,
  stepFromValues,
} from "./rows.js";
import type { Prepare, StoreContext } from "./sql.js";

/** Each key's latest outcome (no record of a higher generation under its key). */
const LATEST = `SELECT ${STEP_SELECT} FROM steps s WHERE s.run_id = ? AND NOT EXISTS (
  SELECT 1 FROM steps l WHERE l.run_id = s.run_id AND l.key = s.key AND l.generation > s.generation)`;

/** No step record under the key: a call begun but not completed. */
const UNFINISHED = `NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = x.run_id AND s.key = x.key)`;

const KEYS = "x.key IN (SELECT value FROM json_each(?))";

export async function readJournalPage(
  ctx: StoreContext,
  p: { runId: string; from: number; limit: number },
): Promise<JournalPage> {
  checkPageArguments("readJournalPage", p.runId, { name: "from", value: p.from, min: 0 }, p.limit);
  return ctx.read("readJournalPage", (tx) => {
    const latest = (where: string, seq: number, limit = -1) =>
      (
        tx
          .prepare(`${LATEST} AND ${where} ORDER BY s.seq, s.key LIMIT ?`)
          .raw(true)
          .all(p.runId, seq, limit) as Array<Array<string | number | null>>
      ).map(stepFromValues);
    const cut = cutJournalPage(latest("s.seq >= ?", p.from, p.limit + 1), p.limit);
    const page =
      "steps" in cut
        ? cut
        : {
            steps: latest("s.seq = ?", cut.wholeGroupAt),
            more: latest("s.seq > ?", cut.wholeGroupAt, 1).length > 0,
          };
    return { ...page, ...callsOf(tx.prepare, p.runId, page.steps, !page.more) };
  });
}

/** The attempts and intents of `steps`' keys and, with `unfinished`, of every call begun
 *  but not completed. */
function callsOf(
  prepare: Prepare,
  runId: string,
  steps: StepRecord[],
  unfinished: boolean,
): Pick<JournalPage, "attempts" | "intents"> {
  const keys = JSON.stringify(steps.map((s) => s.key));
  // In loadJournal's order, so the views of calls begun but not completed come in its order.
  const order = { attempts: "x.generation, x.id", intents: "x.id" };
  const read = (table: "attempts" | "intents", where: string, ...args: unknown[]) =>
    prepare(
      `SELECT * FROM ${table} x WHERE x.run_id = ? AND ${where} ORDER BY ${order[table]}`,
    ).all(runId, ...args);
  const attempts = [
    ...(read("attempts", KEYS, keys) as AttemptRow[]),
    ...(unfinished ? (read("attempts", UNFINISHED) as AttemptRow[]) : []),
  ].map(attemptFromRow);
  const intents = [
    ...(read("intents", KEYS, keys) as IntentRow[]),
    ...(unfinished ? (read("intents", UNFINISHED) as IntentRow[]) : []),
  ].map(intentFromRow);
  return { attempts, intents };
}

export async function readEvents(
  ctx: StoreContext,
  p: { runId: string; after: number; limit: number },
): Promise<EventRecord[]> {
  checkPageArguments("readEvents", p.runId, { name: "after", value: p.after, min: 0 }, p.limit);
  return ctx.read("readEvents", (tx) =>
    (
      tx
        .prepare("SELECT * FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?")
        .all(p.runId, p.after, p.limit) as EventRow[]
    ).map(eventFromRow),
  );
}
