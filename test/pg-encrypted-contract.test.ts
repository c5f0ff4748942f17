// the whole Store contract through encryptedStore on PostgreSQL, whose open marks the
// store encrypted and so installs the plain-payload triggers (postgres/plain-triggers.ts):
// every verb's legitimate write (ciphertext, the text of undefined, NULL columns, updates of
// rows' other columns) must pass the triggers, none refused with CNPLN.

import { randomBytes } from "node:crypto";
import { type EncryptionKey, encryptedStore } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { createSettableClock, describeStoreContract } from "../src/testing/store-contract.js";
import { postgresTestUrl } from "./helpers/postgres.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";

const url = await postgresTestUrl();
const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

if (url) {
  describeStoreContract(
    "postgres through encryptedStore (marked: triggers installed)",
    async () => {
      const { schema, url: tagged, release } = reusableSchema(url);
      return {
        store: encryptedStore(postgresStore(tagged, { schema, poolSize: 4 }), {
          keys: [key("k1")],
        }),
        clock: createSettableClock(),
        cleanup: release,
        storedBytes: (n) => n + 9 + 1 + 2 + 12 + 16,
        encrypts: true,
      };
    },
  );
}
