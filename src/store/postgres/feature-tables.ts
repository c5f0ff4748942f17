// Table names of the workspace and approval migrations (8 and 9), qualified like those of
// sql.ts. Derived from the runs table's name, which carries the schema (already checked
// against SCHEMA_NAME: the only identifier ever put into SQL text).

import type { Tables } from "./sql.js";

export interface FeatureTables {
  workspaceObjects: string;
  workspaceRefs: string;
  approvals: string;
}

export function featureTables(t: Tables): FeatureTables {
  const schema = t.runs.slice(0, -".runs".length);
  return {
    workspaceObjects: `${schema}.workspace_objects`,
    workspaceRefs: `${schema}.workspace_refs`,
    approvals: `${schema}.approvals`,
  };
}
