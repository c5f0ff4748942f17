// The five-tool agent loop (parallel tool calls, one external effect) in a real worker
// process, SIGKILLed at every model-call and tool-call boundary in turn: before and after
// each call's record, inside each provider call and each tool, and around the effect's
// intent; on SQLite and on PostgreSQL. A new worker finishes each run. For every kill point:
// - the output equals the undisturbed run's;
// - no model call is made again once its response is recorded: the provider is called
//   3 times, plus once if the kill cut a call whose response was not yet recorded;
// - no tool executes twice, except one whose execution the kill cut (started, not yet
//   recorded); the effect is performed once, reconcile asked only if its intent was
//   durable and its completion not;
// - every cut call shows a WORKER_LOST attempt, and the recorded spend is the sum over
//   the recorded attempts: three priced responses.

import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { realClock, type Store, sqliteStore } from "../src/index.js";
import { idempotencyKey } from "../src/lib/ids.js";
import { postgresStore } from "../src/postgres.js";
import type { Journal } from "../src/store/store.js";
import { USD_PER_CALL } from "./fixtures/ai-agent.js";
import { near } from "./helpers/ai.js";
import { pool, spawnFixture } from "./helpers/child.js";
import { BACKENDS, pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDir } from "./helpers/sqlite.js";

const tmp = tempDir("cairn-ai-kill-");
afterAll(() => tmp.cleanup());

const MODEL_KEYS = ["model:mock-model-id", "model:mock-model-id#2", "model:mock-model-id#3"];
const TOOLS = ["search", "fetchPage", "calculate", "writeNote", "openPullRequest"];
const POINTS = [
  ...MODEL_KEYS.flatMap((key, i) => [
    `before:step:${key}`,
    `after:step:${key}`,
    `during:model:${i + 1}`,
  ]),
  ...TOOLS.flatMap((t) => [`before:step:tool:${t}:`, `after:step:tool:${t}:`, `during:tool:${t}`]),
  "before:intent:tool:openPullRequest:",
  "after:intent:tool:openPullRequest:",
];

/** "sqlite" (a file in the scenario's directory) or "pg:<schema>". */
function storeOf(dir: string, spec: string): Store {
  if (spec === "sqlite") return sqliteStore(join(dir, "cairn.db"));
  return postgresStore(pgUrl!, { schema: spec.slice(3), poolSize: 2 });
}

async function journalOf(
  dir: string,
  spec: string,
): Promise<Journal & { spent: Record<string, number> }> {
  const store = storeOf(dir, spec);
  await store.open({ clock: realClock });
  try {
    const spent = (await store.getRun("agent"))?.budgetSpent ?? {};
    return { ...(await store.loadJournal("agent")), spent };
  } finally {
    await store.close();
  }
}

function lines(dir: string, file: string): string[] {
  try {
    return readFileSync(join(dir, file), "utf8").split("\n").filter(Boolean);
  } catch {
    return [];
  }
}

interface AtKill {
  ledger: string[];
  recorded: Set<string>;
  intents: Set<string>;
}

const drops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const drop of drops.splice(0)) await drop();
});

describe.each(BACKENDS)(
  "the agent loop killed at every model-call and tool-call boundary (%s)",
  (backend) => {
    it(`${POINTS.length} kill points: same output, nothing recorded is paid for or executed twice`, async () => {
      const scenarios = ["none", ...POINTS].map((point, i) => {
        const dir = join(tmp.dir, `${backend}-${i}`);
        mkdirSync(dir);
        let spec = "sqlite";
        if (backend === "postgres") {
          const { schema, drop } = testSchema(pgUrl!, "cairn_aikill");
          drops.push(drop);
          spec = `pg:${schema}`;
        }
        return { point, dir, spec };
      });
      const atKill = new Map<string, AtKill>();
      await pool(scenarios, 2, async (s) => {
        const res = await spawnFixture("ai-kill-child.ts", ["kill", s.dir, s.spec, s.point]).done;
        if (s.point === "none") expect(res.code, res.stderr).toBe(3);
        else expect(res.signal, `${s.point}: ${res.stderr}`).toBe("SIGKILL");
        const j = await journalOf(s.dir, s.spec);
        atKill.set(s.point, {
          ledger: lines(s.dir, "ledger.txt"),
          recorded: new Set(j.steps.map((r) => r.key)),
          intents: new Set(j.intents.map((r) => r.key)),
        });
      });
      const fin = await spawnFixture("ai-kill-child.ts", [
        "finish",
        ...scenarios.map((s) => `${s.dir}=${s.spec}`),
      ]).done;
      expect(fin.code, fin.stderr).toBe(0);
      const outputs = JSON.parse(fin.stdout) as Record<string, unknown>;
      const undisturbed = outputs[scenarios[0]!.dir] as { text: string; turns: number };
      expect(undisturbed.turns).toBe(3);
      expect(undisturbed.text).toMatch(/^Done with durability: search=3 results/);

      const cuts = { model: 0, tool: 0, reconcile: 0 };
      for (const s of scenarios) {
        const where = s.point;
        expect(outputs[s.dir], where).toEqual(undisturbed);
        const before = atKill.get(s.point)!;
        const j = await journalOf(s.dir, s.spec);
        const ledger = lines(s.dir, "ledger.txt");
        const lost = new Set(
          j.attempts.filter((a) => a.error.code === "WORKER_LOST").map((a) => a.key),
        );

        // Model calls: a recorded response is never asked for again.
        const modelAtKill = before.ledger.filter((l) => l === "model").length;
        const recordedModels = MODEL_KEYS.filter((k) => before.recorded.has(k));
        const cutModel = modelAtKill - recordedModels.length;
        expect(cutModel, where).toBeGreaterThanOrEqual(0);
        expect(cutModel, where).toBeLessThanOrEqual(1);
        expect(ledger.filter((l) => l === "model").length, where).toBe(3 + cutModel);
        if (cutModel === 1) expect(lost.has(MODEL_KEYS[recordedModels.length]!), where).toBe(true);
        cuts.model += cutModel;

        // Tool calls, by their keys (the ledger names each execution by its idempotency key).
        const toolKeys = j.steps.map((r) => r.key).filter((k) => k.startsWith("tool:"));
        expect(toolKeys.length, where).toBe(5);
        for (const key of toolKeys) {
          const tool = key.split(":")[1]!;
          const idem = idempotencyKey("agent", key);
          const runs = (l: string[]) => l.filter((x) => x === `tool ${tool} ${idem}`).length;
          const cut = runs(before.ledger) > 0 && !before.recorded.has(key);
          if (tool === "openPullRequest") {
            expect(runs(ledger), `${where}: ${key} performed`).toBe(1);
            const reconciles = ledger.filter((x) => x === `reconcile ${tool} ${idem}`).length;
            const ambiguous = before.intents.has(key) && !before.recorded.has(key);
            expect(reconciles, `${where}: ${key} reconciled`).toBe(ambiguous ? 1 : 0);
            cuts.reconcile += reconciles;
          } else {
            expect(runs(ledger), `${where}: ${key} executed`).toBe(cut ? 2 : 1);
          }
          if (cut) expect(lost.has(key), `${where}: ${key} WORKER_LOST`).toBe(true);
          if (cut && tool !== "openPullRequest") cuts.tool++;
        }
        expect(lines(s.dir, "prs.txt").length, where).toBe(1);

        // Spend: the run's total is the sum over its recorded outcomes and attempts, which
        // hold the three recorded responses (a cut attempt's spend is not known).
        let usd = 0;
        let tokens = 0;
        for (const r of [...j.steps, ...j.attempts]) {
          usd += r.spend.usd ?? 0;
          tokens += r.spend.tokens ?? 0;
        }
        expect(near(usd, 3 * USD_PER_CALL), where).toBe(true);
        expect(tokens, where).toBe(3600);
        expect(near(j.spent.usd ?? 0, usd), where).toBe(true);
        expect(j.spent.tokens, where).toBe(tokens);
      }
      // The kills did cut calls: each model call before its record and inside the provider,
      // each plain tool before its record and inside it; the effect's ambiguous windows.
      expect(cuts.model).toBeGreaterThanOrEqual(6);
      expect(cuts.tool).toBeGreaterThanOrEqual(8);
      expect(cuts.reconcile).toBeGreaterThanOrEqual(3);
    }, 600_000); // 28 worker processes, two at a time
  },
);
