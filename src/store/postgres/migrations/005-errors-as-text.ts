// 5: errors as text. jsonb refuses the escapes "\u0000" and unpaired surrogates, so an
// error message with a NUL (or half an emoji) failed its whole group commit, and the run
// was handed back and executed again, forever. Errors are now stored in the canonical
// JSON text the SQLite store uses (error-json.ts), which holds any message exactly;
// existing ones are converted to that text. append_records is created again so that no
// session keeps a plan made for the old column types; its SQL is migration 3's, unchanged.

import { appendRecordsSql } from "./append-records.js";
import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 5,
  statements: (t) => [
    `ALTER TABLE ${t.runs} ALTER COLUMN error TYPE text USING ${errorText("error")}`,
    `ALTER TABLE ${t.steps} ALTER COLUMN error TYPE text USING ${errorText("error")}`,
    `ALTER TABLE ${t.attempts} ALTER COLUMN error TYPE text USING ${errorText("error")}`,
    appendRecordsSql(t, 3),
  ],
};

/** SQL turning a jsonb error `{name, message, code?, stack?}` in `column` into errorJson's
 *  text: `["name","message",code|null,stack|null]`, each string escaped by to_json exactly
 *  as JSON.stringify escapes it. */
function errorText(column: string): string {
  const str = (field: string) => `coalesce(to_json(${column} ->> '${field}')::text, 'null')`;
  const opt = (field: string) =>
    `CASE WHEN jsonb_typeof(${column} -> '${field}') = 'string'
      THEN to_json(${column} ->> '${field}')::text ELSE 'null' END`;
  return `(CASE WHEN ${column} IS NULL THEN NULL ELSE
    '[' || ${str("name")} || ',' || ${str("message")} || ',' || ${opt("code")} || ',' ||
    ${opt("stack")} || ']' END)`;
}
