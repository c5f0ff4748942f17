// The text of every released PostgreSQL migration, pinned (for the schema "cairn"). A
// schema records only the numbers of the migrations it ran, so an edited migration would
// leave schemas migrated before the edit silently different from new ones: change the
// schema with a new migration instead (append-records.ts shares text between migrations,
// which this test keeps honest). A new migration adds its hash here.

import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { tablesIn } from "../sql.js";
import { MIGRATIONS, SCHEMA_VERSION } from "./index.js";

const RELEASED: Array<[version: number, sha256: string]> = [
  [1, "00e21db659bca2f3e1761da5f4a53531c732f61db7284c8ac0926da798690f09"],
  [2, "99badfd6de61dc058d0d85b36239eeb2c9514843381d0acbd6458228d96ec76c"],
  [3, "dacf278c7db9b06f20ad04ecbc1c6a654cb54534c9c4f10d7d55cbdf15377451"],
  [4, "6c462ab9ce2f268ce18d011e645f559084b739db0fcae77994f29ba67767d77c"],
  [5, "ebc54b1c70b528c87a4e6bea3a8780b30b97613018aa3501499a6a2c860a7088"],
  [6, "6275afb4945be10b1d82c5af63855fc496137da574dab99e845f52f31d060241"],
  [7, "6b910b4b25b3675bb2cf8b1d78177c9d46e91613d581066562d020e1f0fa9ad4"],
  [8, "1e72b7798f74e147a619b7b7ab9249c397ad08a27219f8e74e54f77c221228b2"],
  [9, "b8bee36a3c08ba0ff714700106d49f3e338a7caa5834a4ff6e06d24d9ef6837e"],
  [10, "cf4254aa09a40324bef88948f22fd2a881faf19ab0ed7d97016fa4156a5a1551"],
  [11, "9a0c9d44a4a38f40629ac87bc0c1b95d4286526f05f0a4c4b19d361d94a88f86"],
  [12, "5ee5b00d9a19115ff33b7822c02c726f11a0f8c2302ddb95ba395537fdf852b6"],
  [13, "24e1eb62f3ee5b052f5e330ef70842c1cc9062115d40a7ac9f87c495f85b65bb"],
  [14, "44d39b71201d1996efa5b80b274ba9a41cfa699ab59e1d3244dfe00d2c27cb7f"],
  [15, "78144c06a0894baa9c4bc4a7c8ffc315421c06fa1e74458136be3295ba5aab09"],
  [16, "7b85f1394fc2d311e6043ad7a799870c17517abc49643b7831ba1bd5fbdf4d7c"],
  [17, "4077bd661a95379b1a6b2e51caa4f8a389f8e4a91ca725e32c569d64398ea44d"],
  [18, "10dec1e6c22918c95320e08c2fc050827c5c439fe4e35ede211c82782abb257a"],
  [19, "0f75c8eb8b2cc73d12540bc0d5f107713e1afadbcd9346d7bc600b2522d21483"],
  [20, "a43a806300d13cc866312ec11bc7cccc156805217d7cd72bbddddcc549bac73f"],
  [21, "c48d8aa666889c3a31da78008c87b674a2cf8129727965c97e91396085e23302"],
  [22, "71827b395c8e86177a7f09871583f2f3f7b96d03ab6295f076375a8039e71173"],
  [23, "0e0c46492dea42e320411612c0b5fe8ea5d82103e7de4ec97b7e7909d5d06e04"],
  [24, "081b5caab0c86a0619366cea1a8ecd2791f89115d0a1f6f0f6ef7eed2d25c890"],
  [25, "0500ac76206f11b849a562705b235af3820295c4bb8b25ced456d1f9d8843752"],
  [26, "4b8b772ab1e38bca54509aae7061463d58eaaa33c84b34f085b9c6dbb3e22a9b"],
  [27, "b1d37e11e4b8b46996d35e6fceff7eeb7ef7e24a23eaa6eddc82ae2775922538"],
];

describe("PostgreSQL migrations", () => {
  it("are numbered 1, 2, 3, ... in the order they are listed", () => {
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
    expect(SCHEMA_VERSION).toBe(MIGRATIONS.length);
  });

  it("keep the exact text each had when it was released", () => {
    const t = tablesIn("cairn");
    const hashes = MIGRATIONS.map((m): [number, string] => [
      m.version,
      createHash("sha256")
        .update(JSON.stringify(m.statements(t)))
        .digest("hex"),
    ]);
    expect(hashes.slice(0, RELEASED.length)).toEqual(RELEASED);
    expect(hashes.length, "a new migration adds its hash to RELEASED").toBe(RELEASED.length);
  });

  it("name only the schema they are given", () => {
    const statements = MIGRATIONS.flatMap((m) => m.statements(tablesIn("elsewhere")));
    expect(statements.join("\n")).not.toContain('"cairn"');
    expect(statements.filter((s) => s.includes('"elsewhere".')).length).toBeGreaterThan(20);
  });
});
