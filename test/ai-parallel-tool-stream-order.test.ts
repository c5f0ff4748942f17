// A streamText tool loop whose first turn calls one tool six times in parallel (ids c0..c5,
// bodies of different lengths, so their results reach the stream in completion order), then
// calls it again under two of the same ids. The worker dies after each record of the second
// turn; the workflow reads every part of fullStream. Each execution's later invocation (the
// replay) must be handed what the dying one was handed, in the same order: the tool results
// of the first turn included, which the stream yields in the order their steps' outcomes
// were handed over. (The output itself is not compared with the undisturbed run: which tool
// of the first turn finishes first is timing, so a crash run's first execution may order
// them otherwise; crashSweep reports that as a difference.)

import { stepCountIs, streamText, tool } from "ai";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createAi } from "../src/ai/index.js";
import { sqliteStore, workflow } from "../src/index.js";
import { crashSweep } from "../src/testing/index.js";
import { PRICES } from "./fixtures/ai-agent.js";
import { answeringModel, textAnswer, toolCallsAnswer, turnOf } from "./helpers/ai-mock.js";
import { tempDbPath } from "./helpers/sqlite.js";

const db = tempDbPath();
afterAll(() => db.cleanup());
const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const LENGTHS = [9, 1, 5, 3, 7, 0];

describe("a streamed tool loop with parallel calls of one tool, the worker dying in its second turn", () => {
  it("every replay hands the stream's parts over as the dying execution did", async () => {
    const model = answeringModel((prompt) => {
      const turn = turnOf(prompt);
      if (turn === 0)
        return toolCallsAnswer(
          "lookup",
          LENGTHS.map((_, i) => ({ id: `c${i}`, input: { i } })),
        );
      if (turn === 1)
        return toolCallsAnswer(
          "lookup",
          [0, 1].map((i) => ({ id: `c${i}`, input: { i } })),
        );
      return textAnswer("done");
    });
    const ai = createAi({ store: sqliteStore(db.path), prices: PRICES });
    // What each invocation of the workflow's function was handed, per execution of the sweep.
    let invocations: string[][] = [];
    const executions: string[][][] = [];
    const wf = workflow({ name: "ai-stream-order", version: "1" }, async (ctx) => {
      const seen: string[] = [];
      invocations.push(seen);
      const r = streamText({
        model: ai.model(ctx, model, { stream: true }),
        tools: ai.tools(ctx, {
          lookup: tool({
            inputSchema: z.object({ i: z.number() }),
            execute: async ({ i }, o) => {
              await delay(LENGTHS[i] ?? 0);
              return `r${i}:${o.toolCallId}`;
            },
          }),
        }),
        stopWhen: stepCountIs(5),
        prompt: "go",
      });
      for await (const part of r.fullStream) {
        if (part.type === "tool-call") seen.push(`call ${part.toolCallId}`);
        if (part.type === "tool-result")
          seen.push(`result ${part.toolCallId}=${String(part.output)}`);
        if (part.type === "finish-step") seen.push("finish-step");
      }
      return seen.length;
    });
    try {
      const res = await crashSweep({
        workflows: [wf],
        workflow: wf,
        input: undefined,
        // The second turn's tool calls: by then every result of the first has been handed.
        filter: (b) => b.key.endsWith("#2") && b.point === "after-record",
        reset: () => {
          if (invocations.length) executions.push(invocations);
          invocations = [];
        },
        normalize: () => null,
      });
      executions.push(invocations);
      expect(res.baseline.status).toBe("completed");
      // After the records of the second model call and of its two tool calls.
      expect(res.boundaries.map((b) => b.boundary.key).sort()).toEqual([
        "model:mock-model-id#2",
        "tool:lookup:c0#2",
        "tool:lookup:c1#2",
      ]);
      expect(res.boundaries.every((b) => b.crashed)).toBe(true);
      const crashRuns = executions.slice(1);
      expect(crashRuns.length).toBe(3);
      for (const [e, invs] of crashRuns.entries()) {
        const [dying, replay] = invs as [string[], string[]];
        expect(invs.length, `execution ${e + 1}`).toBe(2);
        // The dying execution saw the first turn's six results.
        expect(dying.filter((s) => s.startsWith("result")).length).toBeGreaterThanOrEqual(6);
        expect(replay.slice(0, dying.length), `execution ${e + 1}`).toEqual(dying);
        for (const s of replay.filter((x) => x.startsWith("result"))) {
          const [, id, i] = /^result (c\d)=r(\d):(c\d)$/.exec(s) ?? [];
          expect(`c${i}`, s).toBe(id);
        }
      }
      expect(res.failures).toEqual([]);
    } finally {
      await ai.close();
    }
  });
});
