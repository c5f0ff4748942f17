// 16: what a store says of itself, by name. `encrypted` is written by encryptedStore when it
// opens the store: a process given no keys then refuses to write plain text into it, however
// its runs look (a guess from the newest runs missed ciphertext while none had finished).

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 16,
  sql: `
      CREATE TABLE store_marks (
        name TEXT PRIMARY KEY,
        marked_at INTEGER NOT NULL
      ) WITHOUT ROWID;
    `,
};
