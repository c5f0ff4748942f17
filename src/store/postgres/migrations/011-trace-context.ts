// 11: the trace context (W3C traceparent) of the start() call that created a run, so
// each execution's span joins that trace, across crashes and resumes.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 11,
  statements: (t) => [`ALTER TABLE ${t.runs} ADD COLUMN trace_context text`],
};
