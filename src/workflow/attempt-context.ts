// The `s` a step body is handed, one per attempt: its idempotency key, attempt number,
// abort signal and spend. The key (a hash) and the signal (an AbortController) are made when
// the body first reads them: most bodies read neither, and both showed in a per-step
// profile. A class, its getters written once on the prototype and defined on each `s` as
// its own enumerable properties (the prototype's getter functions, no closure per attempt):
// a spread or Object.assign of `s` (`fetchWith({ ...s, retries })`) copies the key and the
// signal, as it did of the object literal `s` was; a copy whose idempotencyKey is undefined
// would let a provider's deduplication through. They are defined by __defineGetter__ (an
// accessor, enumerable and configurable, as the descriptors said): Object.defineProperties
// read each descriptor object field by field and cost ~6,600 instructions an attempt under
// callgrind; two __defineGetter__ calls cost ~2,750 (bench/step-instructions.ts, issue 13).
// What the getters read is keyed by this module's symbols, not private (#) fields: a getter
// runs with `this` as the body reached it, a Proxy around `s` (a tracing wrapper's
// `new Proxy(s, {})`) or an object made from it (Object.create(s)), which have no private
// fields of `s` ("Cannot read private member"), and read symbol-keyed ones through `s`, as
// the object literal's closures read their variables.

import { idempotencyKey } from "../lib/ids.js";
import type { LazyAbort } from "../lib/lazy-abort.js";
import type { Amounts } from "../store/store.js";
import type { StepContext } from "./context-types.js";

const RUN_ID = Symbol("cairn.attempt.runId");
const CALL_KEY = Symbol("cairn.attempt.callKey");
const ABORT = Symbol("cairn.attempt.abort");
const KEY = Symbol("cairn.attempt.key");

export class AttemptContext implements StepContext {
  readonly attempt: number;
  /** Its own function (not a prototype method): `const { spend } = s` keeps working. */
  readonly spend: (amounts: Amounts) => void;
  readonly [RUN_ID]: string;
  readonly [CALL_KEY]: string;
  readonly [ABORT]: LazyAbort;
  [KEY]: string | undefined;

  constructor(
    attempt: number,
    runId: string,
    callKey: string,
    abort: LazyAbort,
    spend: (amounts: Amounts) => void,
  ) {
    this.attempt = attempt;
    this.spend = spend;
    this[RUN_ID] = runId;
    this[CALL_KEY] = callKey;
    this[ABORT] = abort;
    this[KEY] = undefined;
    defineOwnGetter(this, "idempotencyKey", KEY_GETTER);
    defineOwnGetter(this, "signal", SIGNAL_GETTER);
  }

  /** Stable for (run id, step key): the same on every attempt and every resume. */
  get idempotencyKey(): string {
    this[KEY] ??= idempotencyKey(this[RUN_ID], this[CALL_KEY]);
    return this[KEY];
  }

  get signal(): AbortSignal {
    return this[ABORT].signal;
  }
}

/** Object.prototype.__defineGetter__ (ECMAScript Annex B), which TypeScript's lib leaves out:
 *  taken once, when this module loads, so a hardening library that deletes it later does not
 *  break every step; where it is already gone, Object.defineProperty does the same. */
const ANNEX_B_DEFINE_GETTER = (
  Object.prototype as { __defineGetter__?: (name: string, get: () => unknown) => void }
).__defineGetter__;

function defineOwnGetter(o: object, name: string, get: () => unknown): void {
  if (ANNEX_B_DEFINE_GETTER !== undefined) ANNEX_B_DEFINE_GETTER.call(o, name, get);
  else Object.defineProperty(o, name, { get, enumerable: true, configurable: true });
}

/** The prototype's getters, defined on each attempt as its own (see the header). */
const KEY_GETTER = getterOf("idempotencyKey");
const SIGNAL_GETTER = getterOf("signal");

function getterOf(name: "idempotencyKey" | "signal"): () => unknown {
  const get = Object.getOwnPropertyDescriptor(AttemptContext.prototype, name)?.get;
  if (get === undefined) throw new Error(`AttemptContext has no getter ${name}`);
  return get;
}
