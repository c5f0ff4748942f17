// Scripted language models for cairn/ai tests: one answer function serves both the
// generate and the stream call of a MockLanguageModelV4, so a test written once runs under
// generateText and streamText alike.

import { convertArrayToReadableStream, MockLanguageModelV4 } from "ai/test";
import { USAGE } from "../fixtures/ai-agent.js";

type Mock = MockLanguageModelV4;
export type MockPrompt = Parameters<Mock["doGenerate"]>[0]["prompt"];
export type MockAnswer = Awaited<ReturnType<Mock["doGenerate"]>>;
export type MockStreamPart =
  Awaited<ReturnType<Mock["doStream"]>>["stream"] extends ReadableStream<infer P> ? P : never;

/** How many answers of the model the prompt already holds (0 on the first call). */
export function turnOf(prompt: MockPrompt): number {
  return prompt.filter((m) => m.role === "assistant").length;
}

/** The JSON tool results in a prompt, in order, as "id=value". */
export function toolResultsOf(prompt: MockPrompt): string[] {
  const out: string[] = [];
  for (const m of prompt) {
    if (m.role !== "tool") continue;
    for (const p of m.content) {
      if (p.type === "tool-result" && p.output.type === "json")
        out.push(`${p.toolCallId}=${JSON.stringify(p.output.value)}`);
    }
  }
  return out;
}

/** An answer calling `toolName` once per entry of `calls`, each with its id and input. */
export function toolCallsAnswer(
  toolName: string,
  calls: Array<{ id: string; input: unknown }>,
): MockAnswer {
  return {
    content: calls.map((c) => ({
      type: "tool-call" as const,
      toolCallId: c.id,
      toolName,
      input: JSON.stringify(c.input),
    })),
    finishReason: { unified: "tool-calls", raw: undefined },
    usage: USAGE,
    warnings: [],
  };
}

/** A final answer: `text`, finish reason "stop". */
export function textAnswer(text: string): MockAnswer {
  return {
    content: [{ type: "text", text }],
    finishReason: { unified: "stop", raw: undefined },
    usage: USAGE,
    warnings: [],
  };
}

/** The stream of an answer: its text and tool calls as parts, then its finish part. */
export function streamPartsOf(a: MockAnswer): MockStreamPart[] {
  const parts: MockStreamPart[] = [{ type: "stream-start", warnings: [] }];
  for (const c of a.content) {
    if (c.type === "text") {
      parts.push({ type: "text-start", id: "t" });
      parts.push({ type: "text-delta", id: "t", delta: c.text });
      parts.push({ type: "text-end", id: "t" });
    } else if (c.type === "tool-call") parts.push(c);
  }
  parts.push({ type: "finish", finishReason: a.finishReason, usage: a.usage });
  return parts;
}

/** A model whose generate and stream calls both give `answer(prompt)`. */
export function answeringModel(answer: (prompt: MockPrompt) => MockAnswer): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    doGenerate: async (o) => answer(o.prompt),
    doStream: async (o) => ({
      stream: convertArrayToReadableStream(streamPartsOf(answer(o.prompt))),
    }),
  });
}
