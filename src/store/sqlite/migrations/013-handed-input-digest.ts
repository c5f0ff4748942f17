// 13: a child run keeps a digest of the input its parent's ctx.child handed in. A parent that
// crashed between the child's create and its own record of the call finds the child when
// replayed; the child's stored input is what its input schema made of the input, on its
// version, so through a schema or on another version the call could not be compared with
// it, and a call handing another input adopted a child computed from the old one. Runs
// created before have none (NULL): compared as before.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 13,
  sql: "ALTER TABLE runs ADD COLUMN handed_input_digest TEXT;",
};
