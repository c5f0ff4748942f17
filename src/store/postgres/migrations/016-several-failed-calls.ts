// 16: a release may name several failed calls. A run that Promise.any failed (every branch
// failed: an AggregateError) was failed by each of those calls, and a resume executes each
// of them again; release_runs (migration 13) appended only one key, 'failed_key'. The
// function is replaced by migration 13's own text with that one expression changed: it now
// appends every key of 'failed_keys' (in order), and still takes 'failed_key' from a worker
// of an older cairn during a rolling deploy.

import type { Tables } from "../sql.js";
import { migration as groupedReleases } from "./013-grouped-releases.js";
import type { Migration } from "./index.js";

const ONE_KEY = `failed_calls = r.failed_calls || CASE
                WHEN v_status = 'failed' AND v_failed_key <> ''
                THEN jsonb_build_array(jsonb_build_object('key', v_failed_key,
                  'generation', cur.generation))
                ELSE '[]'::jsonb END,`;

const EVERY_KEY = `failed_calls = r.failed_calls || CASE
                WHEN v_status = 'failed'
                THEN coalesce((SELECT jsonb_agg(jsonb_build_object('key', k.key,
                    'generation', cur.generation) ORDER BY k.ord)
                  FROM jsonb_array_elements_text(coalesce(v -> 'failed_keys', CASE
                    WHEN v_failed_key <> '' THEN jsonb_build_array(v_failed_key)
                    ELSE '[]'::jsonb END)) WITH ORDINALITY AS k(key, ord)), '[]'::jsonb)
                ELSE '[]'::jsonb END,`;

function releaseRunsTakingEveryKey(t: Tables): string {
  const [created] = groupedReleases.statements(t);
  if (!created?.startsWith("CREATE FUNCTION") || !created.includes(ONE_KEY)) {
    throw new Error("migration 16: migration 13's release_runs is not the text it replaces");
  }
  return created
    .replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    .replace(ONE_KEY, EVERY_KEY);
}

export const migration: Migration = {
  version: 16,
  statements: (t) => [releaseRunsTakingEveryKey(t)],
};
