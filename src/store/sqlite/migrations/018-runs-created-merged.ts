// 18: one index page less in every run's create. runs_created (created_at, id) served only
// the lists of runs with no status, workflow or parent filter (listRuns in runs.ts), which
// now read the runs of each status in order by runs_status_created (status, created_at, id)
// and merge them (a UNION ALL ordered as the list is: SQLite takes from each status only
// as many as the merge hands on). Every create (a 0-step run's one commit too) wrote a page
// of it: one of the five B-trees a new run's row went into.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 18,
  sql: `
      DROP INDEX runs_created;
    `,
};
