// A provider's failure, as cairn's retry policy should judge it. The SDK's providers throw
// an APICallError (status code, response headers, isRetryable); it is read by shape, not by
// class, so any copy of the SDK (or the gateway's errors) is understood:
// - 429, and "overloaded" (503, 529): RateLimitError, with retryAfter from Retry-After /
//   retry-after-ms or the provider's reset headers (OpenAI x-ratelimit-reset-*, Anthropic
//   anthropic-ratelimit-*-reset), so the retry waits at least that long;
// - any other error the provider calls retryable (5xx, timeouts, connection resets):
//   thrown as it is, retried by the step's policy;
// - a request the provider refused (400, 401, 403, 404, 422 ...): FatalError, since the same
//   request fails the same way again.

import { FatalError, RateLimitError } from "../index.js";
import { MAX_DURATION_MS } from "../lib/duration.js";

interface ApiErrorShape {
  statusCode?: number;
  responseHeaders?: Record<string, string | undefined>;
  isRetryable?: boolean;
  message?: string;
}

const OVERLOADED = new Set([503, 529]);

function shapeOf(err: unknown): ApiErrorShape | undefined {
  for (let e = err, depth = 0; depth < 4 && e && typeof e === "object"; depth++) {
    const s = e as ApiErrorShape & { cause?: unknown };
    if (typeof s.statusCode === "number") return s;
    e = s.cause;
  }
  return undefined;
}

/** The error a step body throws for a failed provider call, and how long the provider
 *  asked everyone to wait (ms; undefined when it did not say). */
export function providerError(
  err: unknown,
  model: { provider: string; modelId: string },
  now: number,
): { error: unknown; retryAfterMs: number | undefined } {
  const api = shapeOf(err);
  if (!api) return { error: err, retryAfterMs: undefined };
  const status = api.statusCode ?? 0;
  const who = `Provider "${model.provider}" (model "${model.modelId}")`;
  if (status === 429 || OVERLOADED.has(status)) {
    const retryAfterMs = retryAfterFrom(api.responseHeaders, now);
    const what = status === 429 ? "rate-limited the call" : "is overloaded";
    const after =
      retryAfterMs === undefined ? "" : `; it asked to wait ${Math.ceil(retryAfterMs / 1000)} s`;
    return {
      error: new RateLimitError(`${who} ${what} (HTTP ${status})${after}`, {
        cause: err,
        ...(retryAfterMs === undefined ? {} : { retryAfter: retryAfterMs }),
      }),
      retryAfterMs,
    };
  }
  if (api.isRetryable === false && status >= 400 && status < 500) {
    return {
      error: new FatalError(
        `${who} refused the call (HTTP ${status}): ${api.message ?? "no message"}; the same request would fail again, so it is not retried`,
        { cause: err },
      ),
      retryAfterMs: undefined,
    };
  }
  return { error: err, retryAfterMs: undefined };
}

/** The error of a provider stream's error part, as an error to record: providers put their
 *  event's error object there ({ type: "overloaded_error", message: "Overloaded" }), which
 *  was recorded as the text String() makes of it, "[object Object]". One with a status code
 *  is wrapped too (a 500 was recorded so): providerError reads the code from its cause. */
export function streamPartError(
  err: unknown,
  model: { provider: string; modelId: string },
): unknown {
  if (err instanceof Error) return err;
  return new Error(
    `Provider "${model.provider}" (model "${model.modelId}") reported an error in its stream: ${describe(err)}`,
    { cause: err },
  );
}

/** A provider stream that ended without its finish part: the answer is cut, so the attempt
 *  fails (retried by the step's policy) rather than record the part it got as the answer. */
export function streamCutError(model: { provider: string; modelId: string }): Error {
  return new Error(
    `Provider "${model.provider}" (model "${model.modelId}") ended its stream without a finish part: the answer is incomplete (a connection closed mid-answer), so it was not recorded; the call is tried again as its step's retry policy allows`,
  );
}

/** A thrown value that is not an Error, as text: its message and type when it has them. */
function describe(err: unknown): string {
  if (typeof err === "string") return err;
  const o = (typeof err === "object" && err !== null ? err : {}) as Record<string, unknown>;
  const message = typeof o.message === "string" ? o.message : undefined;
  const type = typeof o.type === "string" ? o.type : typeof o.code === "string" ? o.code : "";
  if (message !== undefined) return type ? `${message} (${type})` : message;
  try {
    return JSON.stringify(err) ?? String(err);
  } catch {
    return Object.prototype.toString.call(err);
  }
}

/** How long a response asks to wait, in ms: retry-after-ms, Retry-After (seconds or an
 *  HTTP date), else the latest of the provider's reset headers. */
export function retryAfterFrom(
  headers: Record<string, string | undefined> | undefined,
  now: number,
): number | undefined {
  const ms = askedWait(headers, now);
  // A wait longer than cairn schedules (100,000 years) is no wait anyone can keep: taken
  // as given it failed the call's retry with a TypeError, and blocked the shared limiter
  // past what a Date holds, failing every later call of the model on the store.
  return ms === undefined || ms > MAX_DURATION_MS ? undefined : ms;
}

function askedWait(
  headers: Record<string, string | undefined> | undefined,
  now: number,
): number | undefined {
  if (!headers) return undefined;
  const h = new Map<string, string>();
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) h.set(k.toLowerCase(), v);
  const ms = Number.parseFloat(h.get("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return ms;
  const after = h.get("retry-after");
  if (after !== undefined) {
    const seconds = Number(after.trim());
    if (after.trim() !== "" && Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
    const at = Date.parse(after);
    if (Number.isFinite(at)) return Math.max(0, at - now);
  }
  let latest: number | undefined;
  for (const [name, value] of h) {
    let wait: number | undefined;
    if (/^x-ratelimit-reset-(requests|tokens)$/.test(name)) wait = openAiDuration(value);
    else if (/^anthropic-ratelimit-[a-z-]+-reset$/.test(name)) {
      const at = Date.parse(value);
      if (Number.isFinite(at)) wait = Math.max(0, at - now);
    }
    if (wait !== undefined && (latest === undefined || wait > latest)) latest = wait;
  }
  return latest;
}

/** OpenAI's reset durations: "20ms", "1s", "6m0s", "1h2m3.5s". */
function openAiDuration(value: string): number | undefined {
  const re = /(\d+(?:\.\d+)?)(ms|h|m|s)/g;
  let total = 0;
  let matched = "";
  for (const m of value.matchAll(re)) {
    const n = Number.parseFloat(m[1] ?? "0");
    const unit = m[2];
    total +=
      unit === "ms" ? n : unit === "s" ? n * 1000 : unit === "m" ? n * 60_000 : n * 3_600_000;
    matched += m[0];
  }
  return matched.length > 0 && matched === value.trim() ? total : undefined;
}
