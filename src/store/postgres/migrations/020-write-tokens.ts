// 20: the writes whose commit's answer can be lost carry a token of their call, so a retry
// tells its own earlier write from another's. createRun kept its token in claim_token, which
// a claim overwrites: a pending run created by a try whose answer was lost, and claimed
// before the retry, was answered created=false to the call that had made it. sendEvent,
// forkRun and appendStream were not retried after an unknown commit at all (a StoreError
// said the outcome was unknown): a retry would store the event or the chunks twice, or
// answer the fork created=false. Nullable, no default: adding them rewrites nothing.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 20,
  statements: (t) => [
    `ALTER TABLE ${t.runs} ADD COLUMN create_token text`,
    `ALTER TABLE ${t.events} ADD COLUMN send_token text`,
    `ALTER TABLE ${t.runStreams} ADD COLUMN append_token text`,
  ],
};
