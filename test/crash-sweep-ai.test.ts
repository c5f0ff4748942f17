// cairn/testing's crash sweep over an AI SDK agent (cairn/ai): the model calls and tool
// calls are steps, the pull request an effect tool; every boundary of each (before it
// runs, after it returned and before its record, after its record, around the effect's
// intent) ends as the undisturbed run did, with each tool applied once per key and one pull
// request.

import { afterAll, describe, expect, it } from "vitest";
import { createAi } from "../src/ai/index.js";
import { sqliteStore } from "../src/index.js";
import { crashSweep, createSideEffectCounter } from "../src/testing/index.js";
import { agentModel, agentWorkflow, PRICES } from "./fixtures/ai-agent.js";
import { tempDbPath } from "./helpers/sqlite.js";

const db = tempDbPath();
afterAll(() => db.cleanup());

describe("crashSweep over an AI SDK agent", () => {
  it("every model-call, tool-call and effect-tool boundary ends as the undisturbed run did", async () => {
    const fx = createSideEffectCounter();
    const prs = new Map<string, number>();
    const deps = {
      note(line: string) {
        const [kind, tool, key] = line.split(" ");
        if (kind === "tool" && tool !== "openPullRequest") fx.record(`tool:${tool}`, key);
      },
      async createPullRequest(_title: string, marker: string) {
        fx.record("pull-request");
        const pr = { number: prs.size + 1 };
        prs.set(marker, pr.number);
        return pr;
      },
      async findPullRequest(marker: string) {
        const n = prs.get(marker);
        return n === undefined ? undefined : { number: n };
      },
    };
    const ai = createAi({ store: sqliteStore(db.path), prices: PRICES });
    const wf = agentWorkflow(ai, agentModel({ deps }), deps);
    try {
      const sweep = await crashSweep({
        workflows: [wf],
        workflow: wf,
        input: { topic: "durable agents" },
        sideEffects: fx,
        reset: () => prs.clear(),
      });
      expect(sweep.baseline.status).toBe("completed");
      expect(sweep.baseline.sideEffects).toEqual({
        "pull-request": 1,
        "tool:calculate": 1,
        "tool:fetchPage": 1,
        "tool:search": 1,
        "tool:writeNote": 1,
      });
      expect(sweep.failures).toEqual([]);
      // Every boundary was reached, though tool-call keys differ between executions.
      expect(sweep.boundaries.filter((b) => !b.crashed)).toEqual([]);
      const labels = sweep.boundaries.map((b) => b.boundary.label);
      expect(labels.filter((l) => l.includes('"model:')).length).toBeGreaterThanOrEqual(9);
      expect(labels.filter((l) => l.includes('"tool:search')).length).toBeGreaterThanOrEqual(3);
      expect(labels.some((l) => l.startsWith('between effect "tool:openPullRequest'))).toBe(true);
    } finally {
      await ai.close?.();
    }
  });
});
