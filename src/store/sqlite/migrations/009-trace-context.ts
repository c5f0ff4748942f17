// 9: the trace context (W3C traceparent) of the start() call that created a run, so
// each execution's span joins that trace, across crashes and resumes.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 9,
  sql: "ALTER TABLE runs ADD COLUMN trace_context TEXT;",
};
