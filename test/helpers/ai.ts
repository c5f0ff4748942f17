// cairn/ai test helpers: a kit on a harness's storage (closed after each test), in-memory
// side-effect ledgers for the agent fixture, and the arithmetic of recorded spend.

import { afterEach } from "vitest";
import { type Ai, type AiOptions, createAi } from "../../src/ai/index.js";
import type { Engine } from "../../src/index.js";
import type { AgentDeps } from "../fixtures/ai-agent.js";
import { PRICES } from "../fixtures/ai-agent.js";
import type { Harness } from "./engines.js";

const kits: Ai[] = [];
afterEach(async () => {
  for (const k of kits.splice(0)) await k.close();
});

/** A kit on the harness's storage (another connection, as another worker has). */
export function kitFor(h: Harness, options: AiOptions = {}): Ai {
  const ai = createAi({ store: h.store(), clock: h.clock, prices: PRICES, ...options });
  kits.push(ai);
  return ai;
}

export interface MemoryDeps extends AgentDeps {
  lines: string[];
  count(prefix: string): number;
}

export function memoryDeps(): MemoryDeps {
  const lines: string[] = [];
  const prs = new Map<string, number>();
  return {
    lines,
    note: (line) => {
      lines.push(line);
    },
    count: (prefix) => lines.filter((l) => l === prefix || l.startsWith(`${prefix} `)).length,
    createPullRequest: async (_title, marker) => {
      const number = prs.size + 1;
      prs.set(marker, number);
      return { number };
    },
    findPullRequest: async (marker) => {
      const number = prs.get(marker);
      return number === undefined ? undefined : { number };
    },
  };
}

/** Sum of `name` over every recorded step and attempt of the run (what its budget saw). */
export async function recordedSpend(engine: Engine, runId: string, name: string): Promise<number> {
  let total = 0;
  for (const s of await engine.getSteps(runId)) total += s.spend[name] ?? 0;
  return total;
}

export const near = (a: number, b: number) => Math.abs(a - b) < 1e-9;
