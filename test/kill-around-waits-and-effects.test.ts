// Issue 3's kill proofs, with real child processes and SIGKILL:
// 1. effects: killed before/after the intent and after perform/after completion, for each of
//    three effects — exactly one pull request per effect exists afterwards;
// 4. a child run is started once even if the parent is killed right after starting it;
// 5. sleep and wait survive a kill before their record, after it, and after the wake-up.

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeForge, startFakeForge } from "../src/testing/fake-forge.js";
import { pool, spawnFixture } from "./helpers/child.js";
import { tempDir } from "./helpers/sqlite.js";

let forge: FakeForge;
const tmp = tempDir("cairn-kill-");
beforeAll(async () => {
  forge = await startFakeForge();
});
afterAll(async () => {
  await forge.close();
  tmp.cleanup();
});

interface Scenario {
  workflow: string;
  runId: string;
  point: string;
}

async function killThenFinish(
  scenarios: Scenario[],
  ledger: string,
): Promise<Record<string, unknown>> {
  // One database per scenario: a worker must never pick up another scenario's run.
  const dbOf = (s: Scenario) => join(tmp.dir, `${s.runId}.db`);
  const input = JSON.stringify({ ledger, forgeUrl: forge.url });
  await pool(scenarios, 2, async (s) => {
    const { done } = spawnFixture("kill-child.ts", [
      "kill",
      dbOf(s),
      s.workflow,
      s.runId,
      s.point,
      input,
    ]);
    const res = await done;
    expect(res.signal, `${s.runId}: ${res.stderr}`).toBe("SIGKILL");
  });
  const fin = await spawnFixture("kill-child.ts", ["finish", ...scenarios.map(dbOf)]).done;
  expect(fin.code, fin.stderr).toBe(0);
  return JSON.parse(fin.stdout) as Record<string, unknown>;
}

function ledgerLines(ledger: string): string[] {
  return readFileSync(ledger, "utf8").split("\n").filter(Boolean);
}

describe("kills around effects, children, sleeps and waits", () => {
  it("three effects: every kill point leaves exactly one pull request per effect", async () => {
    const ledger = join(tmp.dir, "effects.txt");
    writeFileSync(ledger, "");
    const effects = ["pr-api", "pr-web", "pr-docs"];
    const points = ["before:intent", "after:intent", "before:step", "after:step"];
    const scenarios = effects.flatMap((e) =>
      points.map((p) => ({
        workflow: "three-effects",
        runId: `fx-${e}-${p.replace(":", "-")}`,
        point: `${p}:${e}`,
      })),
    );
    const outputs = await killThenFinish(scenarios, ledger);
    const lines = ledgerLines(ledger);
    const pulls = forge.pulls();
    for (const s of scenarios) {
      expect(outputs[s.runId], s.runId).toBe(3);
      for (const e of effects) {
        const performs = lines.filter((l) => l === `${s.runId} perform ${e}`).length;
        const reconciles = lines.filter((l) => l === `${s.runId} reconcile ${e}`).length;
        const killedHere = s.point.endsWith(`:${e}`);
        expect(performs, `${s.runId} ${e} performs`).toBe(1);
        if (
          killedHere &&
          (s.point.startsWith("after:intent") || s.point.startsWith("before:step"))
        ) {
          // Intent without completion: reconcile was asked once on resume.
          expect(reconciles, `${s.runId} ${e} reconciles`).toBe(1);
        } else {
          expect(reconciles, `${s.runId} ${e} reconciles`).toBe(0);
        }
      }
    }
    // Each (run, effect) marker has exactly one pull request in the forge.
    const byMarker = new Map<string, number>();
    for (const p of pulls) byMarker.set(p.marker ?? "", (byMarker.get(p.marker ?? "") ?? 0) + 1);
    expect(byMarker.size).toBe(scenarios.length * 3);
    expect([...byMarker.values()].every((n) => n === 1)).toBe(true);
  });

  it("a child is started once even if the parent is killed right after starting it", async () => {
    const ledger = join(tmp.dir, "child.txt");
    writeFileSync(ledger, "");
    const outputs = await killThenFinish(
      [{ workflow: "parent", runId: "par", point: "before:intent:kid" }],
      ledger,
    );
    expect(outputs.par).toBe("parent got kid-result");
    expect(outputs["par/kid"]).toBe("kid-result");
    expect(Object.keys(outputs).sort()).toEqual(["par", "par/kid"]);
    // The child was created once. Its step may have run in the killed process too (a body
    // cut by a crash before its record runs again), so its work ran once or twice.
    const work = ledgerLines(ledger);
    expect(new Set(work)).toEqual(new Set(["par/kid kid-work"]));
    expect(work.length).toBeLessThanOrEqual(2);
  });

  it("sleep and wait survive a kill before their record, after it, and after the wake-up", async () => {
    const ledger = join(tmp.dir, "naps.txt");
    writeFileSync(ledger, "");
    const points = [
      "before:intent:nap",
      "after:intent:nap",
      "after:step:nap",
      "before:intent:go",
      "after:intent:go",
      "after:step:go",
    ];
    const scenarios = points.map((p) => ({
      workflow: "napper",
      runId: `nap-${p.replaceAll(":", "-")}`,
      point: p,
    }));
    const outputs = await killThenFinish(scenarios, ledger);
    const lines = ledgerLines(ledger);
    for (const s of scenarios) {
      const out = outputs[s.runId] as { slept: number; waited: number; timedOut: boolean };
      expect(out.timedOut, s.runId).toBe(true);
      expect(out.slept, s.runId).toBeGreaterThanOrEqual(300);
      expect(out.waited, s.runId).toBeGreaterThanOrEqual(300);
      expect(lines.filter((l) => l === `${s.runId} before`).length, s.runId).toBe(1);
      expect(lines.filter((l) => l === `${s.runId} after`).length, s.runId).toBe(1);
    }
  });

  it("a step whose attempts keep killing the process fails after maxAttempts, not forever", async () => {
    const ledger = join(tmp.dir, "poison.txt");
    writeFileSync(ledger, "");
    const db = join(tmp.dir, "poison.db");
    const input = JSON.stringify({ ledger });
    const first = await spawnFixture("kill-child.ts", [
      "kill",
      db,
      "poison",
      "pp",
      "after:step:none",
      input,
    ]).done;
    expect(first.signal).toBe("SIGKILL");
    let kills = 1;
    let out: Record<string, unknown> | undefined;
    for (let i = 0; i < 6 && !out; i++) {
      const fin = await spawnFixture("kill-child.ts", ["finish", db]).done;
      if (fin.signal === "SIGKILL") kills++;
      else out = JSON.parse(fin.stdout) as Record<string, unknown>;
    }
    expect(kills).toBe(3);
    expect(String(out?.pp)).toMatch(/^error: The worker executing step "boom" stopped/);
    expect(ledgerLines(ledger)).toEqual(["pp boom", "pp boom", "pp boom"]);
  });
});
