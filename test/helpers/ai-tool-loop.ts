// A two-turn tool loop over the AI SDK's mock model, for the caller-stop findings: turn 1
// calls the tool `lookup` (id "c1"), turn 2 answers "the answer", generated or streamed; the
// workflow records what each execution's loop ended with, then waits for "go-on", so a sent
// event replays it.

import { generateText, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { workflow } from "../../src/index.js";
import { waitForStatus } from "../../src/testing/index.js";
import { USAGE } from "../fixtures/ai-agent.js";
import { kitFor } from "./ai.js";
import { advanceUntil, type Harness } from "./engines.js";

export type StreamPart =
  Awaited<ReturnType<MockLanguageModelV4["doStream"]>>["stream"] extends ReadableStream<infer P>
    ? P
    : never;

export const settle = <T>(p: Promise<T>): Promise<{ value?: T; error?: Error }> =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error: error as Error }),
  );

const isToolTurn = (prompt: { role: string }[]) => prompt.some((m) => m.role === "tool");

/** A streamed turn that answers `text`. */
export function answerParts(text = "the answer"): StreamPart[] {
  return [
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "t" },
    { type: "text-delta", id: "t", delta: text },
    { type: "text-end", id: "t" },
    { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
  ];
}

/** A streamed turn that calls `lookup` (or `name`) once per entry of `calls`. */
export function toolCallParts(
  calls: ReadonlyArray<{ id: string; input: string; name?: string }>,
): StreamPart[] {
  return [
    { type: "stream-start", warnings: [] },
    ...calls.map(
      (c): StreamPart => ({
        type: "tool-call",
        toolCallId: c.id,
        toolName: c.name ?? "lookup",
        input: c.input,
      }),
    ),
    { type: "finish", finishReason: { unified: "tool-calls", raw: "x" }, usage: USAGE },
  ];
}

/** The mock model's doStream answer streaming `parts`. */
export function streamed(parts: StreamPart[]) {
  return {
    stream: new ReadableStream<StreamPart>({
      start(c) {
        for (const p of parts) c.enqueue(p);
        c.close();
      },
    }),
  };
}

/** Turn 1: one call of `lookup` (id "c1"); turn 2: "the answer". Generated and streamed. */
export function oneToolModel() {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = isToolTurn(o.prompt);
      return {
        content: toolTurn
          ? [{ type: "text", text: "the answer" }]
          : [{ type: "tool-call", toolCallId: "c1", toolName: "lookup", input: "{}" }],
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
    doStream: async (o) => {
      calls++;
      return streamed(
        isToolTurn(o.prompt) ? answerParts() : toolCallParts([{ id: "c1", input: "{}" }]),
      );
    },
  });
  return { model, calls: () => calls };
}

export type Lookup = (signal: AbortSignal | undefined, caller: AbortController) => Promise<string>;

/** A workflow running a two-turn tool loop (generated or streamed) whose `lookup` tool is
 *  `lookup`; it records what each execution's loop ended with, then waits for "go-on". */
export function loopWorkflow(
  h: Harness,
  name: string,
  mode: "generate" | "stream",
  lookup: Lookup,
  timeout?: { toolMs: number; totalMs?: number },
) {
  const { model, calls } = oneToolModel();
  const ai = kitFor(h);
  const outcomes: string[] = [];
  const wf = workflow({ name, version: "1" }, async (ctx) => {
    const caller = new AbortController();
    const tools = ai.tools(ctx, {
      lookup: tool({
        inputSchema: z.object({}),
        execute: (_input, o) => lookup(o.abortSignal, caller),
      }),
    });
    const settings = {
      model: ai.model(ctx, model),
      tools,
      stopWhen: stepCountIs(3),
      prompt: "go",
      abortSignal: caller.signal,
      ...(timeout ? { timeout } : {}),
    };
    let outcome: string;
    try {
      const text =
        mode === "generate"
          ? (await generateText(settings)).text
          : await streamText({ ...settings, onError: () => {} }).text;
      outcome = `answered: ${text}`;
    } catch (err) {
      outcome = `stopped: ${(err as Error).name}: ${(err as Error).message}`;
    }
    outcomes.push(outcome);
    await ctx.waitForEvent("go-on");
    return outcome;
  });
  return { wf, outcomes, calls };
}

/** Runs `wf` to its wait, sends the event (the replay), and returns its result. */
export async function firstAndReplay(h: Harness, wf: ReturnType<typeof loopWorkflow>["wf"]) {
  const engine = h.engine([wf]);
  const run = await engine.start(wf, null);
  await waitForStatus(run, "waiting");
  await engine.sendEvent(run.id, "go-on", null);
  const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
  return { r, run, engine };
}
