// Encrypted bytes (workspace objects): round trip, plain bytes passed through, and bytes
// that begin like an encrypted payload but are cut short or garbled refused with a
// PayloadKeyError that says so (or names the key), never a RangeError.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { PayloadKeyError } from "../errors.js";
import { encryptedBytesKeyId, PayloadCipher } from "./encryption.js";

const MAGIC = Buffer.from("CAIRNENC1", "latin1");
const cipher = new PayloadCipher([{ id: "k1", key: randomBytes(32) }]);
const WHAT = "Workspace object abc";

function refusal(data: Uint8Array, c = cipher): PayloadKeyError {
  try {
    c.decryptBytes(data, WHAT);
  } catch (err) {
    expect(err).toBeInstanceOf(PayloadKeyError);
    return err as PayloadKeyError;
  }
  throw new Error("decryptBytes accepted the bytes");
}

describe("encrypted bytes", () => {
  it("round-trips, and passes plain bytes through", () => {
    const plain = Uint8Array.from([0, 1, 2, 3]);
    const sealed = cipher.encryptBytes(plain);
    expect(encryptedBytesKeyId(sealed)).toBe("k1");
    expect([...cipher.decryptBytes(sealed, WHAT)]).toEqual([...plain]);
    for (const p of [plain, new Uint8Array(0), MAGIC.subarray(0, 5)]) {
      expect(encryptedBytesKeyId(p)).toBeUndefined();
      expect(cipher.decryptBytes(p, WHAT)).toBe(p);
    }
  });

  it("a header cut short or garbled is refused as not an encrypted payload, naming the thing", () => {
    const sealed = Buffer.from(cipher.encryptBytes(Uint8Array.from([7, 7, 7])));
    const cases = [
      MAGIC,
      Buffer.concat([MAGIC, Buffer.from([0])]),
      Buffer.concat([MAGIC, Buffer.from([200]), Buffer.from("k1")]),
      Buffer.concat([MAGIC, Buffer.from([2]), Buffer.from("k")]),
      Buffer.concat([MAGIC, Buffer.from([2]), Buffer.from("k\n"), randomBytes(40)]),
      // A view that ends inside the header: the id must not be read from beyond it.
      new Uint8Array(sealed.buffer, sealed.byteOffset, MAGIC.length + 2),
    ];
    for (const data of cases) {
      expect(() => encryptedBytesKeyId(data, WHAT)).toThrow(PayloadKeyError);
      const err = refusal(data);
      expect(err.message).toContain(WHAT);
      expect(err.message).toContain("is not an encrypted payload that can be read");
      expect(err.keyId).toBe("unknown");
    }
  });

  it("a readable header with a body cut short, or an unknown key, names the key id", () => {
    const sealed = Buffer.from(cipher.encryptBytes(Uint8Array.from([7, 7, 7])));
    const short = refusal(sealed.subarray(0, MAGIC.length + 1 + 2 + 5));
    expect(short.keyId).toBe("k1");
    expect(short.message).toContain('key "k1"');
    const other = new PayloadCipher([{ id: "k2", key: randomBytes(32) }]);
    const err = refusal(sealed, other);
    expect(err.keyId).toBe("k1");
    expect(err.message).toContain(`${WHAT} is encrypted with key "k1"`);
  });
});
