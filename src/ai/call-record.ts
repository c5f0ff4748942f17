// What a model call records: its RESPONSE, never its request. The prompt of turn n is the
// whole conversation so far, but it is rebuilt on replay from the workflow's input and
// the earlier records, so storing it again with every turn would make a conversation's
// journal grow with the square of its length. A record therefore keeps:
// - the response: content (text, reasoning, tool calls with their ids, ...), finish
//   reason, usage, provider metadata, response id/time/model, warnings; for a streamed
//   call, its parts with consecutive deltas of one block joined;
// - a digest of the request (prompt, tools, tool choice, response format): on replay the
//   code must send the same request at that point, or the recorded answer belongs to
//   another conversation and the run fails with NonDeterminismError;
// - nothing of the raw HTTP exchange (request body, response body and headers, raw usage):
//   providers repeat the whole prompt in the request body.

import type { GenerateResult, StreamPart } from "./sdk-types.js";

export interface CallRecord {
  /** Digest of the request (base64url, 16 characters). */
  d: string;
  /** 1: the digest's form: the prompt's URL parts as URLs (their files are downloaded
   *  inside the call: prompt-urls.ts), a file's bytes as bytes (request-text.ts). Older
   *  records digested the files the SDK had downloaded, and bytes as JSON text. */
  u?: 1;
  /** The shared limiter asked to wait until then (clock ms): no call was made. */
  throttledUntil?: number;
  /** A doGenerate response. */
  generate?: GenerateResult;
  /** A doStream response: its parts, deltas of one block joined. */
  parts?: StreamPart[];
}

/** The response as recorded: without the raw exchange, and without undefined fields. */
export function compactGenerate(r: GenerateResult): GenerateResult {
  const out: GenerateResult = {
    content: r.content,
    finishReason: r.finishReason,
    usage: { inputTokens: r.usage.inputTokens, outputTokens: r.usage.outputTokens },
    warnings: r.warnings,
  };
  if (r.providerMetadata !== undefined) out.providerMetadata = r.providerMetadata;
  if (r.structuredOutputText !== undefined) out.structuredOutputText = r.structuredOutputText;
  const res = r.response;
  if (res && (res.id !== undefined || res.timestamp !== undefined || res.modelId !== undefined)) {
    out.response = {};
    if (res.id !== undefined) out.response.id = res.id;
    if (res.timestamp !== undefined) out.response.timestamp = res.timestamp;
    if (res.modelId !== undefined) out.response.modelId = res.modelId;
  }
  return out;
}

/** Adds a streamed part to the recorded list: a delta that continues the previous one of
 *  the same block is joined to it; raw chunks and pings are not kept. */
export function addPart(parts: StreamPart[], part: StreamPart): void {
  if (part.type === "raw" || part.type === "ping") return;
  if (
    (part.type === "text-delta" ||
      part.type === "reasoning-delta" ||
      part.type === "tool-input-delta") &&
    part.providerMetadata === undefined
  ) {
    const last = parts.at(-1);
    if (
      last &&
      last.type === part.type &&
      last.id === part.id &&
      last.providerMetadata === undefined
    ) {
      parts[parts.length - 1] = { ...last, delta: last.delta + part.delta };
      return;
    }
  }
  parts.push(part);
}

/** A recorded stream, replayed as a stream. */
export function streamOf(parts: readonly StreamPart[]): ReadableStream<StreamPart> {
  return new ReadableStream<StreamPart>({
    start(controller) {
      for (const p of parts) controller.enqueue(p);
      controller.close();
    },
  });
}
