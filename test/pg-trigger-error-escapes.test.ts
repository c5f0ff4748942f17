// on a PostgreSQL store marked encrypted, the plain-payload triggers read an error
// record's text (error-json.ts: [name, message, code, stack]) as json. The json type refuses
// a lone surrogate's \u escape (22P02) and its -> a NUL's (22P05) in any element, so an
// encrypted engine's error whose name (kept plain: only message and stack are encrypted)
// held one was refused ("PostgreSQL refused a value of this write (SQLSTATE 22P05)"), as a
// step's, an attempt's and a run's; the same error stores exactly on an unmarked store (the
// Store contract's "stores error records with NUL and lone surrogates exactly"). And a
// keyless store in its window writing such a message in plain text was told "unstorable",
// not the guard's refusal.

import { describe, expect, it } from "vitest";
import { EncryptionKeyMissingError, encryptedStore } from "../src/index.js";
import type { ErrorRecord } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { k1, markedSchemas } from "./helpers/marked-schemas.js";
import { claimedRun, stepFailed } from "./helpers/plain-records.js";

const { storage } = markedSchemas();

const cut = "👍 great".slice(1); // a lone low surrogate, then " great"
const oddError: ErrorRecord = {
  name: `Fatal\u0000${cut}`,
  code: "FATAL",
  message: `a\u0000b ${cut}`,
  stack: `at \u0000 ${cut}`,
};

describe.skipIf(!pgUrl)("PostgreSQL plain triggers and error records with odd escapes", () => {
  it("an encrypted store's error named with a NUL or a lone surrogate is stored exactly", async () => {
    const { make } = storage("plain_esc");
    const keyed = encryptedStore(make(), { keys: [k1] });
    await keyed.open({ clock: createVirtualClock() });
    try {
      expect(await keyed.isMarkedEncrypted?.()).toBe(true);
      const { run } = await keyed.createRun(claimedRun("r"));
      // The lone INSERT's path (a step alone) and append_records's (with an attempt).
      expect(
        await keyed.appendRecords([
          { runId: "r", epoch: run.epoch, steps: [stepFailed("r", "s1", oddError)] },
        ]),
      ).toEqual([{ ok: true }]);
      expect(
        await keyed.appendRecords([
          {
            runId: "r",
            epoch: run.epoch,
            steps: [stepFailed("r", "s2", oddError)],
            attempts: [
              {
                runId: "r",
                key: "s2",
                generation: 0,
                attempt: 1,
                startedAt: 1,
                endedAt: 2,
                error: oddError,
                spend: {},
                retryAt: null,
              },
            ],
          },
        ]),
      ).toEqual([{ ok: true }]);
      const journal = await keyed.loadJournal("r");
      expect(journal.steps.map((s) => s.error)).toEqual([oddError, oddError]);
      expect(journal.attempts.map((a) => a.error)).toEqual([oddError]);
      const released = await keyed.releaseRun({
        runId: "r",
        epoch: run.epoch,
        status: "failed",
        error: oddError,
        reason: "failed",
        readyAt: null,
      });
      expect(released.ok).toBe(true);
      expect((await keyed.getRun("r"))?.error).toEqual(oddError);
    } finally {
      await keyed.close();
    }
  });

  it("a keyless store in its window is refused such a plain message as plain, not as unstorable", async () => {
    const { make } = storage("plain_esc");
    const clock = createVirtualClock();
    const plain = make();
    await plain.open({ clock });
    try {
      const { run } = await plain.createRun(claimedRun("r"));
      const keyed = encryptedStore(make(), { keys: [k1] });
      await keyed.open({ clock });
      await keyed.close();
      // The keyless store still believes "not marked": the database refuses.
      const err = await plain
        .appendRecords([{ runId: "r", epoch: run.epoch, steps: [stepFailed("r", "s", oddError)] }])
        .then(
          (outcome) => outcome,
          (e: unknown) => e,
        );
      expect(err).toBeInstanceOf(EncryptionKeyMissingError);
      expect((err as EncryptionKeyMissingError).what).toBe('the error of step "s" of run "r"');
      expect((await plain.loadJournal("r")).steps).toEqual([]);
    } finally {
      await plain.close();
    }
  });
});
