// What a model call records: the response without the raw exchange, streamed deltas of one
// block joined, a digest of the request that ignores how it was sent; and call names.

import { describe, expect, it } from "vitest";
import { callName } from "./call-names.js";
import { addPart, compactGenerate } from "./call-record.js";
import { readRequest } from "./request-text.js";

const requestDigest = (o: Parameters<typeof readRequest>[0]) => readRequest(o, true).digest;

import type { CallOptions, GenerateResult, StreamPart } from "./sdk-types.js";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
  raw: { prompt_tokens: 1 },
};

describe("compactGenerate", () => {
  it("keeps the response and drops the request, the raw body, headers and raw usage", () => {
    const r: GenerateResult = {
      content: [{ type: "text", text: "hi" }],
      finishReason: { unified: "stop", raw: "stop" },
      usage,
      warnings: [],
      request: { body: { messages: ["the whole conversation"] } },
      response: { id: "r1", modelId: "m", timestamp: new Date(0), headers: { a: "b" }, body: {} },
    };
    expect(compactGenerate(r)).toEqual({
      content: [{ type: "text", text: "hi" }],
      finishReason: { unified: "stop", raw: "stop" },
      usage: { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens },
      warnings: [],
      response: { id: "r1", modelId: "m", timestamp: new Date(0) },
    });
  });
});

describe("addPart", () => {
  it("joins consecutive deltas of one block and drops raw chunks and pings", () => {
    const parts: StreamPart[] = [];
    const feed: StreamPart[] = [
      { type: "text-start", id: "a" },
      { type: "text-delta", id: "a", delta: "Hel" },
      { type: "ping" },
      { type: "text-delta", id: "a", delta: "lo" },
      { type: "raw", rawValue: {} },
      { type: "text-delta", id: "b", delta: "other block" },
      { type: "text-delta", id: "a", delta: "!", providerMetadata: { x: { y: 1 } } },
      { type: "text-delta", id: "a", delta: "?" },
      { type: "text-end", id: "a" },
    ];
    for (const p of feed) addPart(parts, p);
    expect(parts).toEqual([
      { type: "text-start", id: "a" },
      { type: "text-delta", id: "a", delta: "Hello" },
      { type: "text-delta", id: "b", delta: "other block" },
      { type: "text-delta", id: "a", delta: "!", providerMetadata: { x: { y: 1 } } },
      { type: "text-delta", id: "a", delta: "?" },
      { type: "text-end", id: "a" },
    ]);
  });
});

describe("requestDigest", () => {
  it("depends on what is asked (prompt, tools, tool choice, format), not how it is sent", () => {
    const base: CallOptions = {
      prompt: [{ role: "user", content: [{ type: "text", text: "q" }] }],
    };
    const d = requestDigest(base);
    expect(d).toMatch(/^[\w-]{16}$/);
    expect(
      requestDigest({ ...base, headers: { a: "1" }, abortSignal: new AbortController().signal }),
    ).toBe(d);
    expect(requestDigest({ ...base, prompt: [{ role: "system", content: "be terse" }] })).not.toBe(
      d,
    );
    expect(requestDigest({ ...base, toolChoice: { type: "required" } })).not.toBe(d);
  });
});

describe("callName", () => {
  it("escapes cairn's numbering mark and keeps long names within 200 characters", () => {
    expect(callName("tool", "search", "call_1")).toBe("tool:search:call_1");
    expect(callName("tool", "a#b", "id 1")).toBe("tool:a%23b:id_1");
    const long = callName("tool", "search", "x".repeat(300));
    expect(long.length).toBeLessThanOrEqual(200);
    expect(long.startsWith("tool:search:xxx")).toBe(true);
    expect(long).not.toBe(callName("tool", "search", `${"x".repeat(299)}y`));
  });
});
