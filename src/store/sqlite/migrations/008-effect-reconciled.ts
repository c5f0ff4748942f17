// 8: an effect's record says whether reconcile found its value (1) or perform made it
// (0); NULL for other calls and for records from before.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 8,
  sql: "ALTER TABLE steps ADD COLUMN reconciled INTEGER;",
};
