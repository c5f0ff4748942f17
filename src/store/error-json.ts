// A recorded error as text, in ONE canonical form both backends store (SQLite in TEXT
// columns, PostgreSQL in text columns since its migration 5): a JSON array of the documented
// fields in a fixed order. JSON escapes NUL and lone surrogates, so any message is stored
// exactly (PostgreSQL jsonb would refuse both), and "the same record" means the same text
// whatever the order of the writer's keys or its `undefined` members.

import type { ErrorRecord } from "./store.js";

/** Canonical JSON of an error record: only its documented fields, in a fixed order. */
export function errorJson(e: ErrorRecord): string {
  const code = typeof e.code === "string" ? e.code : null;
  const stack = typeof e.stack === "string" ? e.stack : null;
  return JSON.stringify([e.name, e.message, code, stack]);
}

export function parseError(json: string): ErrorRecord {
  const [name, message, code, stack] = JSON.parse(json) as [
    string,
    string,
    string | null,
    string | null,
  ];
  const e: ErrorRecord = { name, message };
  if (code !== null) e.code = code;
  if (stack !== null) e.stack = stack;
  return e;
}
