// What a model call costs: its usage as named amounts (tokens of each kind, and dollars
// when the model has a price), spent with the call's attempt so that the run's budget
// sees it. Prices and limits are looked up by "provider:model", most specific first.

import type { Amounts } from "../index.js";
import { roundAmount } from "../lib/amounts.js";
import type { Usage } from "./sdk-types.js";

/** Dollars per million tokens. `cachedInput`, `cacheWrite` default to `input`;
 *  `reasoning` defaults to `output`. */
export interface ModelPrice {
  input: number;
  output: number;
  cachedInput?: number;
  cacheWrite?: number;
  reasoning?: number;
}

/** Keys of a table keyed by model, most specific first: "openai.chat:gpt-4o",
 *  "openai:gpt-4o", "openai.chat:*", "openai:*", "*". The SDK names providers
 *  "openai.chat", "anthropic.messages", ...: the part before the dot is the provider. */
export function modelKeys(model: { provider: string; modelId: string }): string[] {
  const base = model.provider.split(".")[0] ?? model.provider;
  const keys = [`${model.provider}:${model.modelId}`, `${base}:${model.modelId}`];
  keys.push(`${model.provider}:*`, `${base}:*`, "*");
  return [...new Set(keys)];
}

/** The entry of `table` for `model`, and the key it was found under. */
export function lookupModel<T>(
  table: Readonly<Record<string, T>> | undefined,
  model: { provider: string; modelId: string },
): { key: string; value: T } | undefined {
  if (!table) return undefined;
  for (const key of modelKeys(model)) {
    const value = table[key];
    if (value !== undefined) return { key, value };
  }
  return undefined;
}

/** A model call's usage as amounts: `tokens` (input + output), each kind of token that is
 *  not zero, and `usd` when there is a price. */
export function spendOf(usage: Usage | undefined, price: ModelPrice | undefined): Amounts {
  const input = usage?.inputTokens;
  const output = usage?.outputTokens;
  const inputTotal = count(input?.total);
  const cacheRead = count(input?.cacheRead);
  const cacheWrite = count(input?.cacheWrite);
  const noCache = count(input?.noCache ?? inputTotal - cacheRead - cacheWrite);
  const outputTotal = count(output?.total);
  const reasoning = count(output?.reasoning);
  const text = count(output?.text ?? outputTotal - reasoning);
  const amounts: Amounts = { tokens: inputTotal + outputTotal };
  const named: Array<[string, number]> = [
    ["inputTokens", inputTotal],
    ["outputTokens", outputTotal],
    ["cachedInputTokens", cacheRead],
    ["reasoningTokens", reasoning],
  ];
  for (const [k, v] of named) if (v > 0) amounts[k] = v;
  if (price) {
    const usd =
      (noCache * price.input +
        cacheRead * (price.cachedInput ?? price.input) +
        cacheWrite * (price.cacheWrite ?? price.input) +
        text * price.output +
        reasoning * (price.reasoning ?? price.output)) /
      1_000_000;
    // Twelve decimals (lib/amounts.ts, the one rounding of amounts): far below a cent, and
    // no float noise in the recorded amounts.
    amounts.usd = roundAmount(usd);
  }
  return amounts;
}

/** A provider's token count as a spend: a count that is not a finite number >= 0 (a server
 *  that reports more cached tokens than prompt tokens gives the SDK a negative noCache) is
 *  none. s.spend() refuses negative and non-finite amounts: passed on, one would fail the
 *  attempt after the provider had answered (and charged), and make the call again. */
function count(n: number | undefined): number {
  return typeof n === "number" && Number.isFinite(n) && n > 0 ? n : 0;
}

/** Tokens a call may take, before it is made (the limiter's estimate): about four
 *  characters a token for the prompt, plus the output it may produce. */
export function estimateTokens(promptChars: number, maxOutputTokens: number | undefined): number {
  return Math.ceil(promptChars / 4) + (maxOutputTokens ?? 0);
}

/** Tokens a call took, by its recorded usage. */
export function usedTokens(usage: Usage | undefined): number {
  return count(usage?.inputTokens?.total) + count(usage?.outputTokens?.total);
}
