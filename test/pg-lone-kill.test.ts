// SIGKILL of a real worker process at each boundary of PostgreSQL's lone create (one
// prepared INSERT, created claimed) and lone completion (one prepared fenced UPDATE):
// before the statement is sent, after it is sent and before its answer is read, and as
// its answer comes in, before the JavaScript that asked sees it. Another engine finds the
// run (or, killed before the create was sent, no run) and ends it exactly once: its result
// right, no step body run again, the run's steps recorded once each.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createEngine } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { loneKillWorkflow } from "./fixtures/lone-kill-workflow.js";
import { spawnFixture } from "./helpers/child.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDir } from "./helpers/sqlite.js";

const tmp = tempDir("cairn-lone-");
afterAll(() => tmp.cleanup());

// The three that leave the most to the next engine (each case costs two processes; the
// other three, "before-send" and "after-send" of the create and "after-send" of the
// completion, passed as well when this was written).
const CASES = [
  ["cairn_create_run", "at-answer"],
  ["cairn_complete_run", "before-send"],
  ["cairn_complete_run", "at-answer"],
] as const;

describe.skipIf(!pgUrl)(
  "PostgreSQL: a worker SIGKILLed around its lone create and completion",
  () => {
    it.each(CASES)(
      "%s, killed %s: the run ends once, no body run twice",
      async (statement, point) => {
        const url = pgUrl as string;
        const { schema, drop } = testSchema(url);
        const runId = `run_${statement}_${point}`.replace(/-/g, "_");
        const ledger = join(tmp.dir, `${runId}.ledger`);
        process.env.H5_LEDGER = ledger;
        try {
          const child = await spawnFixture("lone-kill-child.ts", [
            url,
            schema,
            statement,
            point,
            runId,
            ledger,
          ]).done;
          expect(child.signal, child.stdout + child.stderr).toBe("SIGKILL");
          const ranInChild = readFileSync(ledger, "utf8").split("\n").filter(Boolean);
          const engine = createEngine({
            store: postgresStore(url, { schema }),
            workflows: [loneKillWorkflow],
            leaseMs: 1_000,
            pollIntervalMs: 20,
          });
          try {
            const found = await engine.getRun(runId);
            if (found === undefined) {
              // Killed before the create landed (before it was sent, or with its bytes still
              // in the process): no run, and no body ran for it.
              expect(statement, `${child.stdout}${child.stderr}`).toBe("cairn_create_run");
              expect(point).not.toBe("at-answer");
              expect(ranInChild).toEqual([]);
              return;
            }
            expect(await engine.handle(runId).result()).toBe(11);
            const ran = readFileSync(ledger, "utf8").split("\n").filter(Boolean);
            // Every body once: the child ran them all before its completion; after a kill
            // around the create, the child (created before the kill) or this engine ran them.
            expect(ran.sort()).toEqual(["a", "b", "c"]);
            if (statement === "cairn_complete_run")
              expect(ranInChild.sort()).toEqual(["a", "b", "c"]);
            const steps = await engine.getSteps(runId);
            expect(steps.map((s) => [s.key, s.status, s.result])).toEqual([
              ["a", "completed", 5],
              ["b", "completed", 10],
              ["c", "completed", 11],
            ]);
            expect((await engine.getRun(runId))?.status).toBe("completed");
          } finally {
            await engine.close();
          }
        } finally {
          await drop();
        }
      },
      60_000,
    );
  },
);
