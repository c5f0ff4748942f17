// 2: the group commit as one function, so appendRecords is ONE round trip whatever the
// batch size (journal-writes.ts explains the semantics it keeps; append-records.ts holds
// the function's text).

import type { Tables } from "../sql.js";
import { appendRecordsSql } from "./append-records.js";
import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 2,
  statements: (t) => [addAmountsSql(t), appendRecordsSql(t, 2)],
};

/** JavaScript's addAmounts in SQL: float8 arithmetic (0.1 + 0.2 is 0.30000000000000004),
 *  without the 12-decimal rounding lib/amounts.ts now does after each addition: rows.ts
 *  rounds a run's budget_spent as it reads it. extra_float_digits
 *  >= 1 prints each float8 in its shortest exact form, so a sum reads back as the same
 *  JavaScript number. A non-number amount, or a sum that is not finite, becomes null,
 *  as JSON.stringify writes NaN and Infinity; a null already there counts as 0.
 *  PL/pgSQL rather than SQL: its plans are cached per session, a SQL function called
 *  from PL/pgSQL would be planned again in every transaction. */
function addAmountsSql(t: Tables): string {
  return `CREATE FUNCTION ${t.addAmounts}(p_into jsonb, p_add jsonb) RETURNS jsonb
      LANGUAGE plpgsql STABLE
      SET extra_float_digits = 1
      AS $fn$
      DECLARE
        v_name text;
        v_amount jsonb;
        v_total float8;
      BEGIN
        FOR v_name, v_amount IN SELECT a.key, a.value FROM jsonb_each(p_add) AS a LOOP
          v_total := coalesce((p_into ->> v_name)::float8, 0)
            + CASE WHEN jsonb_typeof(v_amount) = 'number' THEN v_amount::float8 END;
          p_into := p_into || jsonb_build_object(v_name,
            CASE WHEN v_total IN ('Infinity'::float8, '-Infinity'::float8, 'NaN'::float8)
              THEN NULL ELSE to_jsonb(v_total) END);
        END LOOP;
        RETURN p_into;
      END
      $fn$`;
}
