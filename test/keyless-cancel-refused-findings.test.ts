// A cancel without a reason from a keyless door (`cairn cancel` without
// $CAIRN_ENCRYPTION_KEYS, the HTTP API of `cairn ui` without keys) on a store marked
// encrypted. Its default reason ("canceled by request") and the child-result event it carries
// to a waiting parent are cairn's own words (store/cancel-texts.ts), holding nothing to keep
// secret: the store was refusing them as plain payloads (an earlier mend), which made a
// keyless cancel impossible; it goes through now. A reason given by a keyless door is
// still refused: the CLI says so in its words (exit 1), the HTTP API answers 409
// ENCRYPTION_KEY_MISSING; the run is not canceled.

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

describe("a keyless cancel on a store marked encrypted", () => {
  it("goes through without a reason; a reason given is refused (CLI exit 1, HTTP 409)", async () => {
    const t = tempDir("cairn-keyless-cancel-");
    const path = join(t.dir, "cairn.db");
    const keyed = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k1] }),
      workflows: [wf],
      worker: false,
    });
    await keyed.start(wf, { secret: 1 }, { id: "r1" });
    await keyed.start(wf, { secret: 2 }, { id: "r2" });
    const plain = createEngine({ store: sqliteStore(path), workflows: [wf], worker: false });
    const app = createHttpApp({ engine: plain });
    try {
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const res = await cairn(["cancel", "r1", "--reason", "SECRET why"], env);
      // The CLI's door sees the run's payloads encrypted and says so first.
      expectFailure(res, 1, /run "r1" is encrypted .*CAIRN_ENCRYPTION_KEYS/);
      expect((await keyed.getRun("r1"))?.status).toBe("pending");
      const answered = await call<{ error: { code: string; message: string } }>(
        app.fetch,
        "POST",
        "/api/runs/r2/cancel",
        { body: { reason: "SECRET why" } },
      );
      expect([answered.status, answered.body.error?.code]).toEqual([409, "ENCRYPTION_KEY_MISSING"]);
      expect((await keyed.getRun("r2"))?.status).toBe("pending");
      // Without a reason, both go through.
      const bare = await cairn(["cancel", "r1"], env);
      expect(bare.code, bare.stderr).toBe(0);
      expect((await keyed.getRun("r1"))?.status).toBe("canceled");
      expect((await keyed.getRun("r1"))?.reason).toBe("canceled by request");
      const bareHttp = await call(app.fetch, "POST", "/api/runs/r2/cancel", { body: {} });
      expect(bareHttp.status).toBe(200);
      expect((await keyed.getRun("r2"))?.status).toBe("canceled");
    } finally {
      app.close();
      await plain.close();
      await keyed.close();
      t.cleanup();
    }
  });
});
