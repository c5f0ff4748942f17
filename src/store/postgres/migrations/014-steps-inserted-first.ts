// 14: append_records inserts a write of steps alone first and compares its records with
// stored rows only when one found its key taken (append-records.ts, stepsOnlyInsertedFirst).
// Such writes are nearly all writes (a step's result); the comparison query they skip cost
// about a fifth of an append on a local server. Writes with attempts, intents or events to
// consume take the way migration 10 made, unchanged.

import { appendRecordsSql } from "./append-records.js";
import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 14,
  statements: (t) => [appendRecordsSql(t, 14)],
};
