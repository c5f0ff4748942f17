// The SQLite schema, as an ordered list of migrations, one file each. A file records every
// migration it has applied in `schema_version` (its number and when, never its text); the
// highest row is its version. Migrations only ever get appended here: an applied one is
// never edited, or files already migrated by it would silently differ from new ones
// (migrations.test.ts pins the text of each).

import { migration as initial } from "./001-initial.js";
import { migration as orderedReplay } from "./002-ordered-replay.js";
import { migration as eventIdempotencyKeys } from "./003-event-idempotency-keys.js";
import { migration as workerPidNamespace } from "./004-worker-pid-namespace.js";
import { migration as rateLimitsAndStreams } from "./005-rate-limits-and-streams.js";
import { migration as workspaces } from "./006-workspaces.js";
import { migration as approvals } from "./007-approvals.js";
import { migration as effectReconciled } from "./008-effect-reconciled.js";
import { migration as traceContext } from "./009-trace-context.js";
import { migration as journalOrderIndex } from "./010-journal-order-index.js";
import { migration as workerLeasesAndEpochFloor } from "./011-worker-leases-and-epoch-floor.js";
import { migration as crashUnjudged } from "./012-crash-unjudged.js";
import { migration as handedInputDigest } from "./013-handed-input-digest.js";
import { migration as heldForBodies } from "./014-held-for-bodies.js";
import { migration as holdsByWorker } from "./015-holds-by-worker.js";
import { migration as storeMarks } from "./016-store-marks.js";
import { migration as leanRunIndexes } from "./017-lean-run-indexes.js";
import { migration as runsCreatedMerged } from "./018-runs-created-merged.js";

export interface Migration {
  version: number;
  /** One script, run by `exec` inside the migrating transaction. */
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  initial,
  orderedReplay,
  eventIdempotencyKeys,
  workerPidNamespace,
  rateLimitsAndStreams,
  workspaces,
  approvals,
  effectReconciled,
  traceContext,
  journalOrderIndex,
  workerLeasesAndEpochFloor,
  crashUnjudged,
  handedInputDigest,
  heldForBodies,
  holdsByWorker,
  storeMarks,
  leanRunIndexes,
  runsCreatedMerged,
];

/** The schema version this code writes; a file with a higher one is refused. */
export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;
