// ctx.sleep, ctx.sleepUntil and ctx.waitForEvent: calls that record an intent (the wake
// time, the deadline) and block their branch until it comes or an event arrives. They act
// on the run only through CallCore (call-core.ts).

import { decode } from "../codec/codec.js";
import { InputValidationError, toErrorRecord } from "../errors.js";
import { type Duration, MAX_DATE_MS, toMs } from "../lib/duration.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import type { IntentRecord, PendingEvent } from "../store/store.js";
import type { Call, CallCore } from "./call-core.js";
import type { WaitOptions, WaitResult } from "./context-types.js";
import { intentRecord } from "./records.js";
import { checkSchemaOrThrown } from "./schema-check.js";

const WAIT_OPTIONS = ["timeout", "schema"];

export class WaitCalls {
  constructor(private readonly core: CallCore) {}

  sleep(name: string, duration: Duration): Promise<void> {
    let ms: number;
    try {
      if (duration === undefined) throw sleepWithoutDuration(name, this.core.host.runId);
      ms = toMs(duration, `ctx.sleep("${name}") duration`);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.sleepCall(name, "sleep", (now) => now + ms);
  }

  sleepUntil(name: string, until: Date | number): Promise<void> {
    const at = until instanceof Date ? until.getTime() : until;
    if (typeof at !== "number" || !Number.isFinite(at)) {
      return Promise.reject(new TypeError(`ctx.sleepUntil("${name}"): expected a Date or ms`));
    }
    // A Date's own range (100,000,000 days either side of 1970): every backend stores it.
    if (Math.abs(at) > MAX_DATE_MS) {
      return Promise.reject(
        new TypeError(
          `ctx.sleepUntil("${name}"): ${at} ms is outside the range of a Date (±${MAX_DATE_MS} ms); pass a time a Date can hold`,
        ),
      );
    }
    return this.sleepCall(name, "sleepUntil", () => at);
  }

  private sleepCall(
    name: string,
    method: "sleep" | "sleepUntil",
    wakeAtFrom: (now: number) => number,
  ): Promise<void> {
    return this.core.makeCall(name, method, (call) => this.sleepFor(call, wakeAtFrom));
  }

  private async sleepFor(call: Call, wakeAtFrom: (now: number) => number): Promise<void> {
    await this.core.beforeExecute(call);
    const intent = this.core.journal.intents.get(call.key);
    const startedAt = intent?.createdAt ?? this.core.host.clock.now();
    let wakeAt: number;
    if (intent) {
      wakeAt = decode<{ wakeAt: number }>(intent.data).wakeAt;
    } else {
      wakeAt = wakeAtFrom(startedAt);
      await this.core.commit({ intents: [intentRecord(call, { wakeAt }, startedAt)] });
    }
    while (this.core.host.clock.now() < wakeAt) await this.core.block({ key: call.key, wakeAt });
    return this.core.recordValue<void>(call, undefined, startedAt);
  }

  waitForEvent<T>(name: string, options?: WaitOptions<T>): Promise<WaitResult<T>> {
    let timeoutMs: number | undefined;
    try {
      if (typeof name === "string" && name.startsWith("cairn.")) {
        throw new TypeError(
          `ctx.waitForEvent("${name}"): names starting with "cairn." are reserved`,
        );
      }
      const unknown = unknownOptionNames(options, WAIT_OPTIONS);
      if (unknown.length > 0) {
        throw new TypeError(
          `ctx.waitForEvent("${name}") in run "${this.core.host.runId}": ${unknownOptionsText(unknown, WAIT_OPTIONS)}`,
        );
      }
      timeoutMs =
        options?.timeout === undefined
          ? undefined
          : toMs(options.timeout, `ctx.waitForEvent("${name}") timeout`);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.core.makeCall(name, "wait", (call) => this.waitFor(call, name, timeoutMs, options));
  }

  private async waitFor<T>(
    call: Call,
    name: string,
    timeoutMs: number | undefined,
    options?: WaitOptions<T>,
  ): Promise<WaitResult<T>> {
    await this.core.beforeExecute(call);
    const intent = this.core.journal.intents.get(call.key);
    const startedAt = intent?.createdAt ?? this.core.host.clock.now();
    const { deadline, fresh } = waitDeadline(call, intent, startedAt, timeoutMs, {
      event: name,
    });
    if (fresh) await this.core.commit({ intents: [fresh] });
    const lastLook = { done: false };
    for (;;) {
      // Past the deadline, only an event stored by then counts (it may have come from
      // another process: read the store once more before concluding it did not).
      const taking = this.core.takeEvent(name, deadline);
      const ev: PendingEvent | undefined = taking instanceof Promise ? await taking : taking;
      if (ev) {
        const consume = [{ eventSeq: ev.seq, key: call.key }];
        let payload = decode<T>(await this.core.eventPayload(ev));
        if (options?.schema) {
          // An event the schema refuses is consumed, and the wait fails with the reason: the
          // workflow sees it (and may wait again), a replay sees the same.
          // A validator that throws (or rejects) refuses the event too: were its error handed
          // over unrecorded, a replay would see another outcome (or loop, handed back).
          const checked = await this.core.active0(checkSchemaOrThrown(options.schema, payload));
          if ("thrown" in checked) {
            return this.core.recordError(call, toErrorRecord(checked.thrown), startedAt, {
              consume,
            });
          }
          if (!checked.ok) {
            const err = new InputValidationError(
              `Event "${name}" (seq ${ev.seq}) for run "${this.core.host.runId}" does not match the wait's schema: ${checked.detail}`,
              checked.issues,
            );
            return this.core.recordError(call, toErrorRecord(err), startedAt, { consume });
          }
          payload = checked.value;
        }
        return this.core.recordValue(call, { timedOut: false, payload }, startedAt, consume, {
          value: payload,
        });
      }
      if (deadline !== null && this.core.host.clock.now() >= deadline) {
        if (await lookedPastDeadline(this.core, call.key, deadline, name, lastLook)) {
          return this.core.recordValue<WaitResult<T>>(call, { timedOut: true }, startedAt);
        }
        continue;
      }
      await this.core.block({ key: call.key, wakeAt: deadline, event: name });
    }
  }
}

/** A wait's deadline: the one its intent recorded, or, on its first execution, one from
 *  `timeoutMs` with the intent that records it (committed before the call waits). */
export function waitDeadline(
  call: Call,
  intent: IntentRecord | undefined,
  startedAt: number,
  timeoutMs: number | undefined,
  extra: Record<string, unknown>,
): { deadline: number | null; fresh?: IntentRecord } {
  if (intent) return { deadline: decode<{ deadline: number | null }>(intent.data).deadline };
  const deadline = timeoutMs === undefined ? null : startedAt + timeoutMs;
  return { deadline, fresh: intentRecord(call, { deadline, ...extra }, startedAt) };
}

/** A wait (or an approval) past its deadline takes only an event the store took by then,
 *  and the store takes events by its own clock: until that clock has passed the deadline
 *  too, the branch waits for it; then the run's events are read once more (another process
 *  may have sent one). True once that last look is done: nothing came, the wait timed out. */
export async function lookedPastDeadline(
  core: CallCore,
  key: string,
  deadline: number,
  event: string,
  lastLook: { done: boolean },
): Promise<boolean> {
  if (lastLook.done) return true;
  const behind = await core.storeBehind(deadline);
  if (behind > 0) {
    await core.block({ key, wakeAt: core.host.clock.now() + behind, event });
    return false;
  }
  lastLook.done = true;
  await core.reloadEvents(true);
  return false;
}

/** `ctx.sleep("1h")`: one argument, as Temporal's `sleep("1 hour")` takes. The name comes
 *  first: say so, with the call that was meant, rather than "cannot parse undefined". */
function sleepWithoutDuration(name: unknown, runId: string): TypeError {
  const given = typeof name === "string" ? JSON.stringify(name) : String(name);
  let asDuration = false;
  try {
    if (typeof name === "string" || typeof name === "number") toMs(name);
    asDuration = typeof name === "string" || typeof name === "number";
  } catch {
    // not a duration either
  }
  return new TypeError(
    `ctx.sleep(${given}) in run "${runId}": no duration given. ctx.sleep takes a name, then a duration: ${
      asDuration ? `ctx.sleep("wait", ${given})` : `ctx.sleep(${given}, "1h")`
    } (a name as for a step; the duration in milliseconds or a string like "30s", "10m", "2h")`,
  );
}
