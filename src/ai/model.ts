// A durable language model: the model the AI SDK calls from workflow code, whose every
// call (doGenerate, doStream) is a cairn step. The first execution calls the provider and
// records the response; a replay returns the recorded response without calling it.
//
// One call is one step (again under the next key, after a durable sleep, while the shared
// limiter throttles it); its body, one attempt, is model-attempt.ts. On replay the record
// must answer the same request (its digest), or the run fails with NonDeterminismError.
// The SDK's own retries never run: a durable call fails with cairn's recorded error, which
// the SDK does not consider retryable. Retries are the step's, and every attempt is
// recorded with its error and spend.
//
// Its parts: model-setup.ts (the settings, checked once), model-attempt.ts (one attempt),
// conversation.ts (where a call stands in the run's call tree), side-work.ts (the kit
// store's work an answered call does not wait long for), caller-abort.ts, caller-stop.ts.

import { NonDeterminismError, type WorkflowContext } from "../index.js";
import { failRunWith } from "../lib/fail-run.js";
import { type CallRecord, streamOf } from "./call-record.js";
import { asStreamEnd, callerAborted } from "./caller-abort.js";
import { certainStopOf, noteLoopSignal } from "./caller-stop.js";
import { type Answered, answered, continueConversation } from "./conversation.js";
import { type Asked, attempt } from "./model-attempt.js";
import {
  type DurableModel,
  type Mode,
  type ModelOptions,
  type ModelRuntime,
  prepareModel,
} from "./model-setup.js";
import { EVERY_URL, hasUrlParts } from "./prompt-urls.js";
import { legacyDigest, readRequest } from "./request-text.js";
import type { CallOptions, LanguageModelV4, ModelObject } from "./sdk-types.js";
import { noteTurn, takeDeferredStop } from "./stop-after-record.js";

export function durableModel(
  rt: ModelRuntime,
  ctx: WorkflowContext,
  model: ModelObject,
  options: ModelOptions = {},
): LanguageModelV4 {
  const m = prepareModel(rt, ctx, model, options);
  return {
    specificationVersion: "v4",
    provider: m.inner.provider,
    modelId: m.inner.modelId,
    // Every URL: the SDK downloads nothing, and a call that runs downloads what its model
    // does not take (prompt-urls.ts), a replayed one nothing.
    supportedUrls: EVERY_URL,
    async doGenerate(o) {
      const rec = await durableCall(m, "generate", o);
      if (!rec.generate) return diverged(ctx, wrongMode(ctx, m.name, "doGenerate"));
      return rec.generate;
    },
    async doStream(o) {
      const rec = await durableCall(m, "stream", o).catch((err: unknown) => {
        throw asStreamEnd(err);
      });
      if (!rec.parts) return diverged(ctx, wrongMode(ctx, m.name, "doStream"));
      return { stream: streamOf(rec.parts) };
    },
  };
}

/** One call: its step (again, after a durable sleep, while the limiter throttles it), and
 *  on replay the check that the recorded response answers this request. */
async function durableCall(m: DurableModel, mode: Mode, o: CallOptions): Promise<CallRecord> {
  const { ctx, name } = m;
  // A call the SDK would not have made: the caller's abort stopped its loop before it in
  // the first execution (caller-stop.ts). It fails with that abort before its step: as a
  // step it took the next number of the model's name (model:x#3), whose record is another
  // call's, the next call of this model (another loop's, or the run's next generateText):
  // the replay failed with NonDeterminismError, or, when that call's request was alike
  // (the conversation so far, continued after the stop), handed this loop its answer. A
  // doubtful stop (an older record) is still made as a step, stopped in its attempt.
  const stopped = certainStopOf(ctx, o.abortSignal);
  if (stopped) throw callerAborted(stopped);
  // The request's text, read once (request-text.ts: a file's bytes make it costly).
  const { digest, prefixes, promptChars, hasBytes } = readRequest(o, m.checkRequest);
  const made = continueConversation(ctx, name, o.prompt, prefixes);
  // The stop that landed as the loop's last tool call was recorded: this call's outcome.
  const stop = takeDeferredStop(ctx, o.abortSignal, made?.continued);
  try {
    return await durableLoop(m, mode, { o, digest, promptChars, hasBytes, stop }, prefixes, made);
  } catch (err) {
    if (made) made.failed = true;
    throw err;
  }
}

async function durableLoop(
  m: DurableModel,
  mode: Mode,
  asked: Asked,
  prefixes: string[] | undefined,
  made: Answered | undefined,
): Promise<CallRecord> {
  const { ctx, name } = m;
  const { digest } = asked;
  for (;;) {
    let ran = false; // made in this execution, not replayed
    const rec = await ctx.step<CallRecord>(
      name,
      (s) => {
        ran = true;
        return attempt(m, s, mode, asked);
      },
      m.stepOptions,
    );
    if (rec.throttledUntil !== undefined) {
      await ctx.sleepUntil(m.throttleName, rec.throttledUntil);
      continue;
    }
    const differs = digest !== "" && rec.d !== "" && rec.d !== digest;
    if (differs && !olderRecordMatches(rec, asked)) {
      return diverged(
        ctx,
        new NonDeterminismError(
          `Run "${ctx.runId}" no longer matches its journal: model call "${name}" was recorded as the answer to another request (its prompt, tools or settings differ from the first run's at this point), so the recorded response cannot stand for this one. Run the code this run started on (${ctx.workflow}@${ctx.version}), or fork the run onto a new version.`,
        ),
      );
    }
    if (prefixes && made) {
      const twin = answered(ctx, name, made, rec);
      if (twin) return diverged(ctx, twin);
    }
    const parts = rec.generate?.content ?? rec.parts;
    noteLoopSignal(ctx, parts, asked.o.abortSignal);
    noteTurn(ctx, parts, asked.o.abortSignal, mode === "stream", made, ran);
    return rec;
  }
}

/** Whether a record written before `u` (call-record.ts) answers this request: its digest
 *  is of the whole JSON text, a file's bytes as JSON (request-text.ts), and of the files
 *  its URL parts gave, downloaded by the SDK: those cannot be checked against the URLs
 *  (nor downloaded again to check them). */
function olderRecordMatches(rec: CallRecord, asked: Asked): boolean {
  if (rec.u !== undefined) return false;
  if (hasUrlParts(asked.o.prompt)) return true;
  return asked.hasBytes && legacyDigest(asked.o) === rec.d;
}

/** Fails the run with a divergence through the engine (lib/fail-run.ts): thrown into the
 *  SDK, streamText would turn it into an error part of its stream. */
function diverged(ctx: WorkflowContext, err: NonDeterminismError): Promise<never> {
  return failRunWith(ctx, err);
}

function wrongMode(ctx: WorkflowContext, name: string, method: string): NonDeterminismError {
  return new NonDeterminismError(
    `Run "${ctx.runId}" no longer matches its journal: model call "${name}" was recorded from the other of generate and stream, and the code now calls ${method} at this point. Run the code this run started on (${ctx.workflow}@${ctx.version}), or fork the run onto a new version.`,
  );
}
