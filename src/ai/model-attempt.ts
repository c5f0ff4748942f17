// One attempt of one durable model call: the body of the call's step.
//   1. the shared limiter admits it (or says "wait until T": the step then records only
//      that, and model.ts sleeps durably before asking again under the next key);
//   2. the files its prompt gives by URL are downloaded (prompt-urls.ts), and the provider
//      is called with the step's signal; a streamed call is read to its finish part,
//      forwarding its parts to the run's stream when asked to;
//   3. its usage is priced and spent with the attempt (tokens, and dollars from the price
//      table), and the window's estimate is corrected to the tokens really used;
//   4. a provider failure becomes what cairn's retry policy should see (provider-errors.ts);
//      a 429 also blocks the shared limiter for everyone, for the provider's Retry-After.

import { randomUUID } from "node:crypto";
import { RateLimitError, type StepContext } from "../index.js";
import { generationOf } from "../lib/run-generation.js";
import { addPart, type CallRecord, compactGenerate } from "./call-record.js";
import { callerAborted } from "./caller-abort.js";
import { stopOf } from "./caller-stop.js";
import type { DurableModel, Mode } from "./model-setup.js";
import { estimateTokens, spendOf, usedTokens } from "./pricing.js";
import { downloadUrlParts } from "./prompt-urls.js";
import { providerError, streamCutError, streamPartError } from "./provider-errors.js";
import { RunStreamWriter } from "./run-stream.js";
import type { CallOptions, StreamPart, Usage } from "./sdk-types.js";
import { deadlineOf, sideWork } from "./side-work.js";
import { orAborted } from "./unheard-abort.js";

/** A call's request, and what cairn read of it once (request-text.ts). */
export interface Asked {
  o: CallOptions;
  digest: string;
  promptChars: number;
  hasBytes: boolean;
  /** The caller's stop this call ends with, not made (stop-after-record.ts). */
  stop?: Error | undefined;
}

/** The usage the provider reported during one attempt (set as soon as it arrives). */
interface Meter {
  usage?: Usage;
}

/** One attempt of one call: the body of the call's step. */
export async function attempt(
  m: DurableModel,
  s: StepContext,
  mode: Mode,
  asked: Asked,
): Promise<CallRecord> {
  const { rt, limitKey } = m;
  const { o, digest } = asked;
  // A signal marked stopped since the call began (model.ts refuses a call made after):
  // the loop is over, the call is not made (caller-stop.ts).
  const stopped = asked.stop ?? stopOf(m.ctx, o.abortSignal);
  if (stopped) throw callerAborted(stopped);
  // Made with a signal that already fired (a loop begun again on a stopped signal): not
  // handed to the provider, whose answer would be thrown away, paid and its spend unrecorded.
  if (o.abortSignal?.aborted && !s.signal.aborted) throw callerAborted(o.abortSignal.reason);
  const deadline = deadlineOf(m);
  // Unique to this execution of the attempt: attempt numbers start again at 1 when a failed
  // run is resumed, and a grant found under the same id is taken as already granted (the
  // store's idempotency, for its own retries), bypassing the window and any block.
  const grantId = `${s.idempotencyKey}:${s.attempt}:${randomUUID()}`;
  const signal = o.abortSignal ? AbortSignal.any([s.signal, o.abortSignal]) : s.signal;
  let prompt: CallOptions["prompt"];
  let admitted = false;
  try {
    if (rt.limiter) {
      // The caller's signal too: an abort during a wait for the window is the call's end,
      // not a wait recorded as "throttled" (and slept durably) with the abort forgotten.
      const tokens = estimateTokens(asked.promptChars, o.maxOutputTokens);
      const a = await rt.limiter.admit(limitKey, m.limits, tokens, grantId, signal);
      if (!a.granted) {
        if (o.abortSignal?.aborted) throw o.abortSignal.reason;
        return { d: digest, u: 1, throttledUntil: a.until };
      }
      admitted = true;
    }
    prompt = await downloadUrlParts(o.prompt, m.inner, m.download, signal);
  } catch (err) {
    // A download that failed sent the provider nothing: the estimate the window took for
    // this attempt is given back (left, a file server's outage held the fleet's tokens).
    if (admitted && rt.limiter && m.limits.tokensPerMinute !== undefined) {
      await sideWork(
        rt,
        rt.limiter.settle(limitKey, grantId, 0),
        `limiter "${limitKey}": the estimate of a call whose files failed to download was not given back`,
        deadline,
      );
    }
    // Named as the abort's error (a download wraps it in its own). Not the provider's
    // failure either way: the limiter is not blocked for a file server's 429.
    if (o.abortSignal?.aborted && !s.signal.aborted) throw callerAborted(o.abortSignal.reason);
    throw err;
  }
  const call = { ...o, prompt, abortSignal: signal };
  const meter: Meter = {};
  try {
    const rec =
      mode === "generate"
        ? await generateOnce(m, s, call, digest, meter)
        : await streamOnce(m, s, call, digest, meter, deadline);
    // Only a tokens-per-minute window needs the estimate corrected.
    if (rt.limiter && m.limits.tokensPerMinute !== undefined) {
      await sideWork(
        rt,
        rt.limiter.settle(limitKey, grantId, usedTokens(meter.usage)),
        `limiter "${limitKey}": the tokens of a call were not settled`,
        deadline,
      );
    }
    return rec;
  } catch (err) {
    // The caller gave up (the SDK's abortSignal): not a failure to retry.
    if (o.abortSignal?.aborted && !s.signal.aborted) throw callerAborted(err);
    throw await providerFailure(m, err, deadline);
  } finally {
    // What the provider reported is spent with this attempt, whether it then succeeded
    // or not (a stream can fail after its usage arrived).
    if (meter.usage) s.spend(spendOf(meter.usage, m.price));
  }
}

async function generateOnce(
  m: DurableModel,
  s: StepContext,
  call: CallOptions,
  digest: string,
  meter: Meter,
): Promise<CallRecord> {
  const r = await orAborted(m.inner.doGenerate(call), call.abortSignal);
  meter.usage = r.usage;
  const generate = compactGenerate(r);
  const meta = callMetadata(m, s);
  generate.response = {
    ...generate.response,
    id: generate.response?.id ?? meta.id,
    timestamp: generate.response?.timestamp ?? meta.timestamp,
  };
  return { d: digest, u: 1, generate };
}

/** What the SDK makes up when a provider does not say (a random id, the current time) is
 *  decided inside the call and recorded, so a replay hands the workflow the same values. */
function callMetadata(m: DurableModel, s: StepContext): { id: string; timestamp: Date } {
  return { id: `cairn-${s.idempotencyKey}`, timestamp: new Date(m.rt.clock.now()) };
}

function withResponseMetadata(parts: StreamPart[], meta: { id: string; timestamp: Date }): void {
  const i = parts.findIndex((p) => p.type === "response-metadata");
  if (i >= 0) {
    const p = parts[i] as Extract<StreamPart, { type: "response-metadata" }>;
    parts[i] = { ...p, id: p.id ?? meta.id, timestamp: p.timestamp ?? meta.timestamp };
    return;
  }
  const start = parts.findIndex((p) => p.type === "stream-start");
  parts.splice(start + 1, 0, { type: "response-metadata", ...meta });
}

/** Reads a streamed call to its end, forwarding its parts to the run's stream if asked. */
async function streamOnce(
  m: DurableModel,
  s: StepContext,
  call: CallOptions,
  digest: string,
  meter: Meter,
  deadline: number | undefined,
): Promise<CallRecord> {
  const { rt, ctx, name } = m;
  const parts: StreamPart[] = [];
  const writer =
    m.stream && rt.store
      ? new RunStreamWriter(await rt.store(), ctx.runId, {
          call: s.idempotencyKey,
          name,
          generation: generationOf(ctx),
          attempt: s.attempt,
        })
      : undefined;
  const r = await orAborted(m.inner.doStream(call), call.abortSignal);
  const reader = r.stream.getReader();
  let readToEnd = false;
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await orAborted(reader.read(), call.abortSignal);
      if (done) break;
      if (value.type === "error") throw streamPartError(value.error, m.id);
      if (value.type === "finish") {
        meter.usage = value.usage;
        finished = true;
      }
      writer?.push(value);
      addPart(parts, value);
    }
    readToEnd = true;
  } finally {
    // Left early (an error part, a failed read): the provider's stream, and the connection
    // under it, is cancelled rather than left to run on. Not awaited: a provider's cancel
    // that hangs must not hold up the attempt.
    if (!readToEnd) reader.cancel().catch(() => {});
    reader.releaseLock();
    // The provider has answered (and charged): a stream that could not be stored
    // must not make the call run again.
    if (writer) {
      const problem = `run "${ctx.runId}": parts of call "${name}" were not forwarded to its stream`;
      await sideWork(rt, writer.close(), problem, deadline);
    }
  }
  // A stream that just ends (a connection closed cleanly mid-answer) holds part of an
  // answer: recorded, every replay would hand the part back as the whole. One that ended
  // because its signal fired (some streams close then) ends as that abort.
  if (!finished) throw call.abortSignal?.aborted ? call.abortSignal.reason : streamCutError(m.id);
  withResponseMetadata(parts, callMetadata(m, s));
  return { d: digest, u: 1, parts };
}

/** What cairn's retry policy should see for a provider's failure; a 429 also blocks the
 *  shared limiter for everyone, for the provider's Retry-After. */
async function providerFailure(
  m: DurableModel,
  err: unknown,
  deadline: number | undefined,
): Promise<unknown> {
  const { error, retryAfterMs } = providerError(err, m.id, m.rt.clock.now());
  if (m.rt.limiter && error instanceof RateLimitError && retryAfterMs) {
    await sideWork(
      m.rt,
      m.rt.limiter.block(m.limitKey, retryAfterMs),
      `limiter "${m.limitKey}": a provider's 429 was not shared with other runs`,
      deadline,
    );
  }
  return error;
}
