// 4: the PID namespace a worker runs in, so a pid is only trusted where it means the
// same process (engine/dead-workers.ts).

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 4,
  sql: "ALTER TABLE workers ADD COLUMN pid_namespace TEXT;",
};
