// Where a page of a run's journal ends (Store.readJournalPage), shared by the backends.
// Completed calls are paged by seq, their call order; after a resume several keys can hold
// one seq (what a failure's handler called in one generation, what the next called there
// instead), so a page never splits such a group: a cursor "from seq N" would otherwise
// skip or repeat its members.

import type { EventHeadsPage, LoadJournalOptions, StepRecord } from "./store.js";

export type PageCut =
  /** The page: these calls; `more` when completed calls follow. */
  | { steps: StepRecord[]; more: boolean }
  /** One seq's group fills more than the page: the caller reads the whole group at `seq`
   *  and whether completed calls follow it. */
  | { wholeGroupAt: number };

/** Cuts `rows` (the first `limit + 1` latest outcomes from the page's position, in
 *  (seq, key) order) into a page of at most `limit` calls ending on a whole seq group. */
export function cutJournalPage(rows: StepRecord[], limit: number): PageCut {
  if (rows.length <= limit) return { steps: rows, more: false };
  const firstLeftOut = rows[limit]!.seq;
  const steps = rows.filter((r) => r.seq < firstLeftOut);
  return steps.length > 0 ? { steps, more: true } : { wholeGroupAt: firstLeftOut };
}

/** The arguments of readJournalPage and readEvents, checked the same way by every backend:
 *  a bad one would read nothing or everything, silently. */
export function checkPageArguments(
  verb: string,
  runId: string,
  position: { name: string; value: number; min: number },
  limit: number,
): void {
  if (!Number.isSafeInteger(position.value) || position.value < position.min) {
    throw new TypeError(
      `${verb}(): "${position.name}" must be a whole number >= ${position.min} (run "${runId}")`,
    );
  }
  if (!Number.isSafeInteger(limit) || limit < 1) {
    throw new TypeError(`${verb}(): "limit" must be a whole number >= 1 (run "${runId}")`);
  }
}

/** Refuses a Store.pendingEventHeadsNamed page that is not one (both backends), naming the
 *  field. */
export function checkEventHeadsPage(runId: string, page: EventHeadsPage): void {
  if (typeof page?.name !== "string") {
    throw new TypeError(
      `pendingEventHeadsNamed(): "name" must be an event name (a string) (run "${runId}")`,
    );
  }
  checkPageArguments(
    "pendingEventHeadsNamed",
    runId,
    { name: "after", value: page.after, min: 0 },
    page.limit,
  );
}

/** How loadJournal reads the unconsumed events: whole, as heads (`eventHeads`), or not at
 *  all (LoadJournalOptions.pendingEvents false). */
export type JournalEvents = "whole" | "heads" | "none";

/** How loadJournal's options ask for the unconsumed events (both backends). */
export function journalEvents(options: LoadJournalOptions | undefined): JournalEvents {
  if (options?.pendingEvents === false) return "none";
  return options?.eventPayloads === false ? "heads" : "whole";
}
