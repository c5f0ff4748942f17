// Inspection's paged reads of a run's journal and events (readJournalPage, readEvents):
// each costs its page through the (run_id, seq) indexes, never a read of the whole run.

import { checkPageArguments, cutJournalPage } from "../journal-page.js";
import type { EventRecord, JournalPage, StepRecord } from "../store.js";
import type { Tx } from "./connection.js";
import {
  type AttemptRow,
  type EventRow,
  type IntentRow,
  type StepRow,
  toAttempt,
  toEvent,
  toIntent,
  toStep,
} from "./rows.js";
import type { StoreContext } from "./sql.js";

export async function readJournalPage(
  ctx: StoreContext,
  p: { runId: string; from: number; limit: number },
): Promise<JournalPage> {
  checkPageArguments("readJournalPage", p.runId, { name: "from", value: p.from, min: 0 }, p.limit);
  const { t } = ctx;
  // Each key's latest outcome (no record of a higher generation under its key).
  const LATEST = `SELECT s.* FROM ${t.steps} s WHERE s.run_id = $1 AND NOT EXISTS (
    SELECT 1 FROM ${t.steps} l WHERE l.run_id = s.run_id AND l.key = s.key AND l.generation > s.generation)`;
  return ctx.db.transaction("readJournalPage", "idempotent", async (tx) => {
    // One snapshot for every statement: a call completing between two of them would be on
    // neither the page nor among the calls not completed.
    await tx.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    const latest = async (where: string, seq: number, limit: number | null = null) =>
      (
        await tx.query<StepRow>(`${LATEST} AND ${where} ORDER BY s.seq, s.key LIMIT $3`, [
          p.runId,
          seq,
          limit,
        ])
      ).rows.map(toStep);
    const cut = cutJournalPage(await latest("s.seq >= $2", p.from, p.limit + 1), p.limit);
    const page =
      "steps" in cut
        ? cut
        : {
            steps: await latest("s.seq = $2", cut.wholeGroupAt),
            more: (await latest("s.seq > $2", cut.wholeGroupAt, 1)).length > 0,
          };
    return { ...page, ...(await callsOf(ctx, tx, p.runId, page.steps, !page.more)) };
  });
}

/** The attempts and intents of `steps`' keys and, with `unfinished`, of every call begun
 *  but not completed, in loadJournal's order. */
async function callsOf(
  ctx: StoreContext,
  tx: Tx,
  runId: string,
  steps: StepRecord[],
  unfinished: boolean,
): Promise<Pick<JournalPage, "attempts" | "intents">> {
  const { t } = ctx;
  const which = unfinished
    ? `(x.key = ANY($2::text[]) OR NOT EXISTS (
        SELECT 1 FROM ${t.steps} s WHERE s.run_id = x.run_id AND s.key = x.key))`
    : "x.key = ANY($2::text[])";
  const keys = steps.map((s) => s.key);
  const attempts = await tx.query<AttemptRow>(
    `SELECT * FROM ${t.attempts} x WHERE x.run_id = $1 AND ${which}
      ORDER BY x.generation, x.started_at, x.key, x.attempt`,
    [runId, keys],
  );
  const intents = await tx.query<IntentRow>(
    `SELECT * FROM ${t.intents} x WHERE x.run_id = $1 AND ${which} ORDER BY x.created_at, x.key`,
    [runId, keys],
  );
  return { attempts: attempts.rows.map(toAttempt), intents: intents.rows.map(toIntent) };
}

export async function readEvents(
  ctx: StoreContext,
  p: { runId: string; after: number; limit: number },
): Promise<EventRecord[]> {
  checkPageArguments("readEvents", p.runId, { name: "after", value: p.after, min: 0 }, p.limit);
  const r = await ctx.db.statement<EventRow>(
    "readEvents",
    "idempotent",
    `SELECT * FROM ${ctx.t.events} WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
    [p.runId, p.after, p.limit],
  );
  return r.rows.map(toEvent);
}
