// vitest globalSetup: a directory where the test files share what a just-migrated PostgreSQL
// schema looks like (test/helpers/postgres-reuse.ts), so it is learned once per run rather
// than by migrating a reference schema in every file. Removed after the run.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export default function setup(): () => void {
  // Both vitest projects run this setup in the one main process: the first makes the
  // directory, and test workers (started after both) inherit it through the environment.
  process.env.CAIRN_PG_SHAPE_DIR ??= mkdtempSync(join(tmpdir(), "cairn-pg-shape-"));
  const dir = process.env.CAIRN_PG_SHAPE_DIR;
  return () => rmSync(dir, { recursive: true, force: true });
}
