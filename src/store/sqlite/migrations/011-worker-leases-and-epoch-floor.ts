// 11: each worker's own lease, so a reader judges a worker row by the worker's lease rather
// than its own (a worker with longer leases heartbeats less often: judged by a shorter lease
// it looked dead, its workflows unserved); and the epoch floor, the largest epoch of any run
// retention deleted. A run created later under a deleted run's id starts above it, so a write
// fenced with the deleted run's epoch (a worker stalled past its lease, its write in flight)
// cannot land in the new run.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 11,
  sql: `
      ALTER TABLE workers ADD COLUMN lease_ms INTEGER;
      CREATE TABLE epoch_floor (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        epoch INTEGER NOT NULL
      );
      INSERT INTO epoch_floor (id, epoch) VALUES (1, 0);
    `,
};
