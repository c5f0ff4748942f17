// engine.sendEvent(): stores a named event for a run (idempotent under an idempotency key)
// and lets the run see it: its execution in this process looks at once, otherwise a claim
// round may pick the run up. Refusals (a finished or unknown run, a full event queue, a key
// reused for another event) store nothing and say so.

import { encode } from "../codec/codec.js";
import { sameStoredValue } from "../codec/same-stored-value.js";
import { LimitError, RunConflictError, runNotFound, SerializationError } from "../errors.js";
import { checkText } from "../lib/text.js";
import { isCiphertext } from "../store/plain-payloads.js";
import type { SendEventOutcome } from "../store/store.js";
import type { SendEventOptions, SentEvent } from "./engine.js";
import { type EngineInternals, ready, runHasNews } from "./engine-internals.js";
import type { Limits } from "./limits.js";
import { checkEventName } from "./validate.js";
import { toEventView } from "./views.js";

export async function sendEvent(
  internals: EngineInternals,
  id: string,
  name: string,
  payload: unknown,
  options: SendEventOptions,
): Promise<SentEvent> {
  await ready(internals);
  const { store, limits, maxPayloadBytes } = internals.config;
  const idempotencyKey = options.idempotencyKey;
  checkIdempotencyKey(idempotencyKey, id);
  checkEventName(name, id);
  let encoded: string;
  try {
    encoded = encode(payload, maxPayloadBytes);
  } catch (err) {
    throw new SerializationError(
      `Event "${name}" for run "${id}": the payload ${(err as Error).message}; nothing was recorded`,
      { cause: err },
    );
  }
  const res = await store.sendEvent({
    runId: id,
    name,
    payload: encoded,
    ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
    maxEvents: limits.maxEventsPerRun,
    maxPending: limits.maxPendingEventsPerRun,
  });
  if (!res.ok) {
    // The same event as stored, in other text (an Error made at another call site, a part
    // view stored before only its bytes were): a resend, as equal text is.
    const resent =
      res.reason === "key-conflict" &&
      res.event.name === name &&
      sameStoredValue(encoded, res.event.payload);
    if (resent) return { event: toEventView(res.event), duplicate: true };
    throw refusal(res, id, name, limits);
  }
  if (!res.duplicate) runHasNews(internals, id);
  return { event: toEventView(res.event), duplicate: res.duplicate };
}

function checkIdempotencyKey(key: unknown, runId: string): void {
  if (
    key !== undefined &&
    (typeof key !== "string" || key.length === 0 || key.length > 256 || key.includes("\u0000"))
  ) {
    throw new TypeError(
      `sendEvent(): the idempotency key for run "${runId}" must be 1-256 characters without NUL`,
    );
  }
  // A lone surrogate would be stored as U+FFFD (PostgreSQL) or as other text (SQLite): two
  // keys would become one, and the second event be answered as a duplicate, never stored.
  checkText(key, `sendEvent(): the idempotency key for run "${runId}"`);
}

/** Why the store did not store event `name` for run `id`, as the error sendEvent throws. */
function refusal(
  res: Extract<SendEventOutcome, { ok: false }>,
  id: string,
  name: string,
  limits: Limits,
): Error {
  switch (res.reason) {
    case "limit": {
      const [option, what] =
        res.limit === "events"
          ? (["maxEventsPerRun", "events"] as const)
          : (["maxPendingEventsPerRun", "events not yet consumed by a wait"] as const);
      return new LimitError(
        `Run "${id}" already has ${res.count} ${what}, the limit (limits.${option}: ${limits[option]}); event "${name}" was not stored. Let the run consume its events, or raise the limit`,
        { limit: option, max: limits[option] },
      );
    }
    case "not-found":
      return runNotFound(id, `event "${name}" was not stored`);
    case "key-conflict":
      // Ciphertext (an encryptedStore sent it) this process, without keys, cannot compare.
      if (isCiphertext(res.event.payload)) {
        return new RunConflictError(
          `Run "${id}" already has event ${res.event.seq} ("${res.event.name}") with this idempotency key, its payload encrypted: this process has no encryption keys to tell whether it is the same event; event "${name}" was not stored. Resend it from a process with the keys (encryptedStore; the CLI and cairn ui: $CAIRN_ENCRYPTION_KEYS)`,
        );
      }
      return new RunConflictError(
        `Run "${id}" already has event ${res.event.seq} ("${res.event.name}") with this idempotency key, with another name or payload; event "${name}" was not stored`,
      );
    case "finished":
      return new RunConflictError(
        `Run "${id}" is ${res.status}; event "${name}" cannot be delivered to a finished run and was not stored`,
      );
  }
}
