// The text of every released SQLite migration, pinned. A file records only the numbers of
// the migrations it ran, so an edited migration would leave files migrated before the edit
// silently different from new ones: change the schema with a new migration instead. A
// new migration adds its hash here.

import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { MIGRATIONS, SCHEMA_VERSION } from "./index.js";

const RELEASED: Array<[version: number, sha256: string]> = [
  [1, "ad6c6ecf9844658b1cef986cb8e2e902ec6401623b4e5802fd93bd28e7b90bd3"],
  [2, "0a433d134da9af6020f9dae32cebcace41305f03e7a91510979a6076480c6fc5"],
  [3, "29d8e1422ff9c5fa1fa7530685a2aa82f8e99ce107f0cc192aa91a97f09c00c4"],
  [4, "145ab8e61be7311501cec64f0be815d2e156c5549e015b9a9e8a56768272e9af"],
  [5, "95b84e8cfb8485ed93912df57cacb76eb085237d78e3895bf23bc0389cadb87c"],
  [6, "499f3ba26f288548c70146ce9ae157c79f3fdef56968f9146f4211ceb076950f"],
  [7, "c88545d6164178da4a162cb2fdc8ac93383884cf7a9d2e4cd8437f75b8e03b46"],
  [8, "96c93661922004149cef33d9dffd8c1206959d5b50f4e6c5606ed2a52c53ed90"],
  [9, "76653be80aa333389bfbe1292c12ed93a936d9c824d193d1761d8af9d2bb156f"],
  [10, "430f64a7f12a09d8f709f3bb480e7881bd33a1571641e726e301d187355532a8"],
  [11, "9922676af1a477696f06815c17da88fd27f0fcb2ead6c20f8c961128a01f133b"],
  [12, "1bbc2b42d083396aa172d6527f5dcb5dde656d481d390f17457c0d510c9b4c24"],
  [13, "ab29f46d353b1da16eb7ab3a9ee5f4c25f996846e2767c6a45bb1266a514f86e"],
  [14, "3a472794b65336e606ae8764135b7067dc4844385eb49fd90c74ed2b1df8e126"],
  [15, "c8023d954a7dce07fa9fec8ab81b1c82cd6eba8bafeb7f313d6a3fd48ec87d3c"],
  [16, "bdbd98a3ca62624c04dbaa9efd1fa2b075b7ff63d3284ac6b1ac4648dd41a96c"],
  [17, "49823975b6417afb38d075a0f749e20f6465c8b3623bc7feac0c5cc0c31cab1c"],
  [18, "ddaa432ece65060bff800c3df30e69a8e3f8b5f616c300fc2d265c4585328efc"],
];

describe("SQLite migrations", () => {
  it("are numbered 1, 2, 3, ... in the order they are listed", () => {
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
    expect(SCHEMA_VERSION).toBe(MIGRATIONS.length);
  });

  it("keep the exact text each had when it was released", () => {
    const hashes = MIGRATIONS.map((m): [number, string] => [
      m.version,
      createHash("sha256").update(m.sql).digest("hex"),
    ]);
    expect(hashes.slice(0, RELEASED.length)).toEqual(RELEASED);
    expect(hashes.length, "a new migration adds its hash to RELEASED").toBe(RELEASED.length);
  });
});
