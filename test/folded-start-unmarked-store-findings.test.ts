// A store that said "marked" reads the mark again before it refuses a plain payload, so a
// mark another process removed (unmarkEncrypted) counts at once (plain-payloads.ts). A
// folded start (SQLite's createReleasedRun: a run whose function ends needing no record is
// created released, its output in the same transaction) asks the guard inside the
// transaction, where the mark cannot be read: it refused the output on the word of the
// stale "marked", although the store was no longer marked: start() rejected. Now it reads
// the mark in that transaction first.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  EncryptionKeyMissingError,
  encryptedStore,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { tempDbPath } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

const noCall = workflow({ name: "no-call", version: "1" }, async () => "plain output");

describe("a folded start on a store unmarked by another process", () => {
  it("completes the run: the mark's removal counts at once", async () => {
    const db = tempDbPath();
    const keyed = encryptedStore(sqliteStore(db.path), { keys: [k1] });
    await keyed.open({ clock: realClock }); // marks the store
    const ends: unknown[] = [];
    const store = around(sqliteStore(db.path), {
      createReleasedRun: (call, run, end) =>
        call(run, () => {
          const r = (end as () => unknown)();
          ends.push(r);
          return r;
        }),
    });
    const e = createEngine({ store, workflows: [noCall], log: () => {} });
    const other = sqliteStore(db.path);
    try {
      // The engine's store reads "marked" as it opens.
      expect(await e.getRun("nothing")).toBeUndefined();
      await other.open({ clock: realClock });
      await (other as { unmarkEncrypted(): Promise<void> }).unmarkEncrypted();
      // A fresh id (no id given): the start may fold.
      const h = await e.start(noCall, undefined).then(
        (x) => x,
        (err: unknown) => err,
      );
      expect(h).not.toBeInstanceOf(Error);
      const handle = h as Awaited<ReturnType<typeof e.start>>;
      expect(await handle.result()).toBe("plain output");
      expect((await e.getRun(handle.id))?.status).toBe("completed");
      // It was folded: the release went in the create's transaction.
      expect(ends).toEqual([expect.objectContaining({ status: "completed" })]);
    } finally {
      await e.close();
      await other.close();
      await keyed.close();
      db.cleanup();
    }
  });

  it("still refuses the plain output of a folded start while the store is marked, nothing written", async () => {
    const db = tempDbPath();
    const keyed = encryptedStore(sqliteStore(db.path), { keys: [k1] });
    await keyed.open({ clock: realClock });
    const e = createEngine({ store: sqliteStore(db.path), workflows: [noCall], log: () => {} });
    try {
      expect(await e.getRun("nothing")).toBeUndefined();
      const err = await e.start(noCall, undefined).then(
        () => undefined,
        (x: unknown) => x,
      );
      expect(err).toBeInstanceOf(EncryptionKeyMissingError);
      expect((err as EncryptionKeyMissingError).what).toMatch(/^the output of run /);
      expect(await e.listRuns()).toEqual([]);
    } finally {
      await e.close();
      await keyed.close();
      db.cleanup();
    }
  });
});
