// 23: removeWorker ends the holds (migration 22) of a worker known dead along with its
// leases, so a resumed run does not wait a lease for a body that died with its worker;
// it finds them by held_by, as it finds the leases by lease_owner.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 23,
  statements: (t) => [`CREATE INDEX runs_held_by ON ${t.runs} (held_by) WHERE held_by IS NOT NULL`],
};
