// The PostgreSQL schema, as an ordered list of migrations, one file each. A schema records
// every migration it has applied in `schema_version` (its number and when, never its
// text); the highest row is its version. A migration, once released, is never edited: add
// a new one instead, or schemas already migrated would silently differ from new ones
// (migrations.test.ts pins the text of each).

import type { Tables } from "../sql.js";
import { migration as initial } from "./001-initial.js";
import { migration as groupCommit } from "./002-group-commit.js";
import { migration as orderedReplay } from "./003-ordered-replay.js";
import { migration as eventIdempotencyKeys } from "./004-event-idempotency-keys.js";
import { migration as errorsAsText } from "./005-errors-as-text.js";
import { migration as workerPidNamespace } from "./006-worker-pid-namespace.js";
import { migration as rateLimitsAndStreams } from "./007-rate-limits-and-streams.js";
import { migration as workspaces } from "./008-workspaces.js";
import { migration as approvals } from "./009-approvals.js";
import { migration as effectReconciled } from "./010-effect-reconciled.js";
import { migration as traceContext } from "./011-trace-context.js";
import { migration as eventsByRun } from "./012-events-by-run.js";
import { migration as groupedReleases } from "./013-grouped-releases.js";
import { migration as stepsInsertedFirst } from "./014-steps-inserted-first.js";
import { migration as workerLeasesAndEpochFloor } from "./015-worker-leases-and-epoch-floor.js";
import { migration as severalFailedCalls } from "./016-several-failed-calls.js";
import { migration as releaseOnlyRunning } from "./017-release-only-running.js";
import { migration as crashUnjudged } from "./018-crash-unjudged.js";
import { migration as handedInputDigest } from "./019-handed-input-digest.js";
import { migration as writeTokens } from "./020-write-tokens.js";
import { migration as stepsByCallOrder } from "./021-steps-by-call-order.js";
import { migration as heldForBodies } from "./022-held-for-bodies.js";
import { migration as holdsByWorker } from "./023-holds-by-worker.js";
import { migration as storeMarks } from "./024-store-marks.js";
import { migration as unconsumedEventsByName } from "./025-unconsumed-events-by-name.js";
import { migration as leanRunIndexes } from "./026-lean-run-indexes.js";
import { migration as stepsFencedNotReferenced } from "./027-steps-fenced-not-referenced.js";

export interface Migration {
  version: number;
  /** The statements, run in order inside the migrating transaction, for a schema's
   *  qualified names (sql.ts). */
  statements(t: Tables): string[];
}

export const MIGRATIONS: readonly Migration[] = [
  initial,
  groupCommit,
  orderedReplay,
  eventIdempotencyKeys,
  errorsAsText,
  workerPidNamespace,
  rateLimitsAndStreams,
  workspaces,
  approvals,
  effectReconciled,
  traceContext,
  eventsByRun,
  groupedReleases,
  stepsInsertedFirst,
  workerLeasesAndEpochFloor,
  severalFailedCalls,
  releaseOnlyRunning,
  crashUnjudged,
  handedInputDigest,
  writeTokens,
  stepsByCallOrder,
  heldForBodies,
  holdsByWorker,
  storeMarks,
  unconsumedEventsByName,
  leanRunIndexes,
  stepsFencedNotReferenced,
];

/** The schema version this code writes and understands. */
export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;
