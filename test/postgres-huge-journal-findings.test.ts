// A run whose 270 steps each returned a 2 MiB string (the default limits allow it): the
// PostgreSQL store's loadJournal read all of a run's steps as one JSON text, longer than
// V8's longest string (512 MiB), and the driver threw inside its socket handler, where no
// caller can catch it: the worker died, and so would every worker that claimed the run
// (and every fork of it). The run is executed, loaded, resumed and forked in a child
// process (test/helpers/huge-journal-child.ts), which exits 3 on such a throw. Failed
// (exit 3, ERR_STRING_TOO_LONG) before the mend.

import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { pgUrl } from "./helpers/engines.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";

const MIB = 1024 * 1024;

// Half a GiB in the database and a 6 GB heap in a child, ~35 s: a soak's (CAIRN_SOAK=1). The
// default run keeps the path it takes (test/postgres-journal-as-rows: parts past 64 MiB read
// as rows, equal to the JSON read).
const SOAK = process.env.CAIRN_SOAK === "1";

describe.skipIf(!pgUrl || !SOAK)("PostgreSQL: a run whose step results pass 512 MiB", () => {
  it("loads, resumes and forks (its steps are read as rows), and the worker lives", async () => {
    const reused = reusableSchema(pgUrl!);
    try {
      const child = spawnSync(
        process.execPath,
        [
          "--max-old-space-size=6144",
          "--import",
          "tsx",
          "test/helpers/huge-journal-child.ts",
          reused.url,
          reused.schema,
        ],
        { encoding: "utf8", maxBuffer: 16 * MIB },
      );
      expect(child.stderr).toBe("");
      expect(child.status).toBe(0);
      const out = JSON.parse(child.stdout.trim().split("\n").pop()!);
      expect(out).toEqual({
        swapped: 270,
        steps: 270,
        loaded: expect.any(Number),
        resumed: 270 * 2 * MIB,
        // The fork executes its fromStep anew (the child's step returns an 8-character mark).
        forked: 269 * 2 * MIB + 8,
      });
      expect(out.loaded).toBeGreaterThan(270 * 2 * MIB);
    } finally {
      await reused.release();
    }
  }, 900_000);
});
