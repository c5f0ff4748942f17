// A keyless door (a process without encryptedStore) may send an event without payload to a
// store marked encrypted: the codec's undefined holds nothing, and the guard lets it be
// (plain-payloads.ts). Resent under the idempotency key a keyed process first sent it with,
// it is the same event, but the stored payload is ciphertext the keyless process cannot
// compare: sendEvent threw RunConflictError "with another name or payload", which is false
// and says nothing of the encryption. Now the refusal says the stored payload is encrypted
// and where to resend from.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  encryptedStore,
  RunConflictError,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };
const waits = workflow({ name: "waits", version: "1" }, async (ctx) => ctx.waitForEvent("go"));

describe("a keyless resend of an event without payload", () => {
  it("is refused naming the encryption, not as another payload", async () => {
    const db = tempDbPath();
    const keyed = createEngine({
      store: encryptedStore(sqliteStore(db.path), { keys: [k1] }),
      workflows: [],
      worker: false,
    });
    const keyless = createEngine({ store: sqliteStore(db.path), workflows: [], worker: false });
    try {
      await keyed.start(waits, undefined, { id: "r" });
      await keyed.sendEvent("r", "go", undefined, { idempotencyKey: "once" });
      const again = await keyless.sendEvent("r", "go", undefined, { idempotencyKey: "once" }).then(
        (res) => res,
        (err: Error) => err,
      );
      expect(again).toBeInstanceOf(RunConflictError);
      expect((again as Error).message).toMatch(
        /payload encrypted.*Resend it from a process with the keys/,
      );
      expect((again as Error).message).not.toMatch(/another name or payload/);
    } finally {
      await keyless.close();
      await keyed.close();
      db.cleanup();
    }
  });
});
