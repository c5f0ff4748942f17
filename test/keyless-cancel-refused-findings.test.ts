// A cancel without a reason from a keyless door (`cairn cancel` without
// $CAIRN_ENCRYPTION_KEYS, the HTTP API of `cairn ui` without keys) on a store marked
// encrypted: no door check looks at it (they check only a reason given), and before the
// mend the default reason ("canceled by request") and the child-result event it carries to a
// waiting parent were stored in plain text. The store refuses now: the CLI says so in its
// words (exit 1), the HTTP API answers 409 ENCRYPTION_KEY_MISSING; the run is not canceled.
// A door keyed goes through.

import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import {
  createEngine,
  type EncryptionKey,
  encryptedStore,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { call } from "./helpers/http.js";
import { tempDir } from "./helpers/sqlite.js";

const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };
const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.waitForEvent("go"));

describe("a keyless cancel without a reason on a store marked encrypted", () => {
  it("is refused by the store: the CLI exits 1 naming the store, the HTTP API answers 409", async () => {
    const t = tempDir("cairn-keyless-cancel-");
    const path = join(t.dir, "cairn.db");
    const keyed = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k1] }),
      workflows: [wf],
      worker: false,
    });
    // Opened after the keyed engine marked the store (one opened before believes "not
    // marked" for up to MARK_FRESH_MS: the window plain-payloads.ts describes).
    await keyed.start(wf, { secret: 1 }, { id: "r1" });
    const plain = createEngine({ store: sqliteStore(path), workflows: [wf], worker: false });
    const app = createHttpApp({ engine: plain });
    try {
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const res = await cairn(["cancel", "r1"], env);
      expectFailure(
        res,
        1,
        /the store ".*cairn\.db" is marked encrypted .*\$CAIRN_ENCRYPTION_KEYS is not set: the cancel reason of run "r1" would be stored in plain text.*nothing was written/,
      );
      expect((await keyed.getRun("r1"))?.status).toBe("pending");
      const answered = await call<{ error: { code: string; message: string } }>(
        app.fetch,
        "POST",
        "/api/runs/r1/cancel",
        { body: {} },
      );
      expect([answered.status, answered.body.error?.code]).toEqual([409, "ENCRYPTION_KEY_MISSING"]);
      expect(answered.body.error.message).toMatch(/cancel reason of run "r1".*nothing was written/);
      expect((await keyed.getRun("r1"))?.status).toBe("pending");
      // With the keys it goes through.
      const keyedRes = await cairn(["cancel", "r1"], {
        ...env,
        CAIRN_ENCRYPTION_KEYS: `k1=${k1.key}`,
      });
      expect(keyedRes.code, keyedRes.stderr).toBe(0);
      expect((await keyed.getRun("r1"))?.status).toBe("canceled");
      expect((await keyed.getRun("r1"))?.reason).toBe("canceled by request");
    } finally {
      app.close();
      await plain.close();
      await keyed.close();
      t.cleanup();
    }
  });
});
