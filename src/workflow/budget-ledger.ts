// A run's budget as one execution keeps it: what its records spent (the store's sum when
// the execution began, plus each record written since), what attempts in flight reserved
// (their estimates, then their actual spend until the record carrying it is durable), and
// ctx.budget.spent as the workflow reads it (a call's spend counted when its outcome is
// handed over, the same point in the workflow's code on every execution).

import {
  addAmounts,
  amountOf,
  formatAmount,
  roundAmount,
  sortedAmounts,
  subtractAmounts,
} from "../lib/amounts.js";
import type { Amounts, AttemptRecord } from "../store/store.js";

export class BudgetLedger {
  private readonly total: Amounts;
  private readonly handedOver: Amounts = {};
  /** Spend of failed attempts this execution recorded, per key, one entry an attempt in
   *  order: counted in ctx.budget when the call's outcome is handed over, as a replay counts
   *  it (handOver). Made at the first (most runs have none). */
  private pending: Map<string, Amounts[]> | undefined;
  /** Estimates (StepOptions.estimate) of the attempts in flight: spend not yet known. */
  private readonly reserved: Amounts = {};

  constructor(
    /** The run's limits (the workflow's defaults, then the run's own). */
    private readonly limit: () => Amounts,
    /** What the run's records had spent when this execution began. */
    spentBefore: Amounts,
    /** The spend of each call's recorded failed attempts (journal-index.ts). */
    private readonly attemptSpend: ReadonlyMap<string, Amounts>,
  ) {
    this.total = { ...spentBefore };
  }

  /** ctx.budget.spent, sorted: the first execution summed it in the order spend was
   *  reported, a replay in the order the store hands records back, and JSON.stringify of
   *  it in a prompt made the replay another call. */
  get spent(): Amounts {
    return sortedAmounts(this.handedOver);
  }

  /** Why an attempt with this estimate may not start now: for some named amount, what is
   *  spent plus what attempts in flight reserved plus this estimate reaches the limit. */
  overBudget(estimate: Amounts): string | undefined {
    // for-in, not Object.entries: asked before every attempt, nearly always of no limits
    // (Object.entries made an array each time; lib/amounts.ts reads amounts so too).
    const limits = this.limit();
    for (const name in limits) {
      if (!Object.hasOwn(limits, name)) continue;
      const limit = limits[name] as number;
      const spent = amountOf(this.total, name);
      const reserved = amountOf(this.reserved, name);
      const wanted = amountOf(estimate, name);
      if (spent >= limit) {
        // One format of amounts for people (lib/amounts.ts): `cairn resume` and the
        // dashboard write the same numbers the same way.
        return `budget: ${name} ${formatAmount(spent)} of ${formatAmount(limit)} spent`;
      }
      // Rounded as every sum of amounts is (lib/amounts.ts): 0.3 spent and an estimate of
      // 0.7 are exactly 1, within a limit of 1, not 1.0000000000000002 over it.
      if (wanted > 0 && roundAmount(spent + reserved + wanted) > limit) {
        const inFlight =
          reserved > 0 ? ` + ${formatAmount(reserved)} reserved by attempts in flight` : "";
        return `budget: ${name} ${formatAmount(spent)} of ${formatAmount(limit)} spent${inFlight}; the next attempt estimates ${formatAmount(wanted)}`;
      }
    }
    return undefined;
  }

  /** An attempt in flight holds `amounts` (its estimate, then its actual spend). */
  reserve(amounts: Amounts): void {
    addAmounts(this.reserved, amounts);
  }

  unreserve(amounts: Amounts): void {
    subtractAmounts(this.reserved, amounts);
  }

  /** A record carrying `spend` is durable: spent, and no longer reserved. */
  recorded(spend: Amounts): void {
    addAmounts(this.total, spend);
    subtractAmounts(this.reserved, spend);
  }

  /** A failed attempt of call `key` this execution recorded (counted at handOver). */
  failedAttempt(key: string, spend: Amounts): void {
    this.pending ??= new Map();
    const pending = this.pending.get(key) ?? [];
    pending.push(spend);
    this.pending.set(key, pending);
  }

  /** Call `key`'s outcome is handed over: ctx.budget.spent takes its spend and every
   *  attempt's (recorded before, recorded by this execution, or in `attempts`). */
  handOver(key: string, spend: Amounts, attempts: readonly AttemptRecord[] = []): void {
    addAmounts(this.handedOver, spend);
    // The attempts' spend is summed one attempt at a time, in the order a replay sums them
    // from the journal (journal-index.ts: by generation, then attempt), and added at once:
    // floating-point sums grouped otherwise differ in their last bits (0.3 + 0.2 + (0.1 +
    // 0.7) is not 0.3 + ((0.1 + 0.7) + 0.2)), and the workflow reads them.
    const recorded = this.attemptSpend.get(key);
    const pending = this.pending?.get(key);
    if (!recorded && !pending && attempts.length === 0) return;
    const total: Amounts = { ...recorded };
    for (const s of pending ?? []) addAmounts(total, s);
    for (const a of attempts) addAmounts(total, a.spend);
    this.pending?.delete(key);
    addAmounts(this.handedOver, total);
  }
}
