// Crash at every boundary: a 12-step run in a child process is SIGKILLed at every
// boundary of every step (before its function, after the function returned but before
// its record, after its record). One restarted process then finishes every run. Each run's
// output must equal an uninterrupted run's, and every step function must have run exactly
// once, except the one killed after its function returned (twice: at-least-once bodies,
// exactly-once records).

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { STEPS } from "./fixtures/twelve-steps.js";
import { pool, spawnFixture } from "./helpers/child.js";
import { tempDir } from "./helpers/sqlite.js";

const POINTS = ["before", "after-fn", "after-record"] as const;

describe("crash at every boundary (SQLite, real SIGKILL)", () => {
  it("every run resumes to the uninterrupted output; only the after-fn step ran twice", async () => {
    const tmp = tempDir("cairn-crash-");
    try {
      const ledger = join(tmp.dir, "ledger.txt");
      writeFileSync(ledger, "");
      const scenarios = POINTS.flatMap((where) =>
        Array.from({ length: STEPS }, (_, i) => ({
          where,
          step: i + 1,
          runId: `run-${where}-${i + 1}`,
          db: join(tmp.dir, `${where}-${i + 1}.db`),
        })),
      );
      await pool(scenarios, 2, async (s) => {
        const { done } = spawnFixture(
          "crash-child.ts",
          ["kill", s.db, s.runId, `${s.where}:${s.step}`, ledger],
          { CAIRN_CRASH_CHILD: "1" },
        );
        const res = await done;
        expect(res.signal, `${s.runId}: ${res.stderr}`).toBe("SIGKILL");
      });
      const fin = spawnFixture("crash-child.ts", ["finish", ledger, ...scenarios.map((s) => s.db)]);
      const res = await fin.done;
      expect(res.code, res.stderr).toBe(0);
      const outputs = JSON.parse(res.stdout) as Record<string, { acc: string; steps: number }>;
      // The golden output: computed independently of the engine.
      const { createHash } = await import("node:crypto");
      let acc = "seed";
      for (let k = 1; k <= STEPS; k++) {
        acc = createHash("sha256").update(`${acc}/${k}`).digest("hex").slice(0, 16);
      }
      const counts = new Map<string, number>();
      for (const line of readFileSync(ledger, "utf8").split("\n")) {
        if (line) counts.set(line, (counts.get(line) ?? 0) + 1);
      }
      for (const s of scenarios) {
        expect(outputs[s.runId], s.runId).toEqual({ acc, steps: STEPS });
        for (let k = 1; k <= STEPS; k++) {
          const expected = s.where === "after-fn" && k === s.step ? 2 : 1;
          expect(counts.get(`${s.runId} ${k}`) ?? 0, `${s.runId} step ${k}`).toBe(expected);
        }
      }
    } finally {
      tmp.cleanup();
    }
  });
});
