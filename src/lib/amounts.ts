// Named amounts ({ tokens: 1200, usd: 0.03 }) are summed in the engine (spend per run,
// per step, per replay point) and in both stores (budget spent): one definition. And written
// for people one way (formatAmount): a budget's reason, the CLI and the dashboard.
//
// Every sum and difference is rounded to AMOUNT_DECIMALS (roundAmount): a float sum of
// prices drifts in its last bits (ten spends of 0.1 summed to 0.9999999999999999, below a
// limit of 1, so an eleventh attempt started; 0.1 + 0.2 read 0.30000000000000004 in
// ctx.budget and the HTTP API), and the drift depended on the order of the sum. Rounded
// after each addition, amounts given to at most 12 decimals (pricing.ts rounds a call's
// usd to them) sum to the exact decimal, whatever the order, on every execution and reader.
//
// Own properties only, as Object.entries would give them, but read with for-in: the engine
// sums amounts several times per step and nearly all of them are empty, and Object.entries
// allocates an array for each even then. The sum reads `into` by own property too: a name
// such as "constructor" or "toString" is an amount like any other, not Object.prototype's.

/** Decimals amounts are exact to: a millionth of a millionth (of a dollar: a token's price
 *  given per million tokens to six decimals). */
export const AMOUNT_DECIMALS = 12;
const SCALE = 1e12;
/** Beyond it, n * SCALE is no longer an exact integer: a double there has no 12 decimals. */
const SCALED_EXACT = 2 ** 53;

/** `n` rounded to AMOUNT_DECIMALS: the double nearest to the decimal, as JSON.parse of that
 *  decimal gives it (an integer count of SCALE units divided by SCALE, both exact, is
 *  correctly rounded once). Integers (token counts) are returned as they are. Above
 *  about 9,007 a double cannot hold 12 decimals: rounded to 15 significant digits, which
 *  removes a sum's noise there too. NaN and the infinities are returned as they are. */
export function roundAmount(n: number): number {
  if (Number.isInteger(n) || !Number.isFinite(n)) return n;
  const scaled = n * SCALE;
  const r =
    Math.abs(scaled) < SCALED_EXACT ? Math.round(scaled) / SCALE : Number(n.toPrecision(15));
  return r === 0 ? 0 : r; // not -0
}

/** `amounts`, a store's sum as read (a fresh object the reader owns), with each amount rounded
 *  in place (roundAmount): no copy, as every run a store reads has one and most are empty. A
 *  value that is not a number (a store's null for a sum that was not finite) is kept. */
export function roundAmountsRead(amounts: Record<string, number>): Record<string, number> {
  for (const k in amounts) {
    if (!Object.hasOwn(amounts, k)) continue;
    const v = amounts[k] as number;
    if (typeof v === "number") amounts[k] = roundAmount(v);
  }
  return amounts;
}

/** Adds `add` into `into`, name by name (each sum rounded: roundAmount), and returns `into`. */
export function addAmounts(
  into: Record<string, number>,
  add: Record<string, number>,
): Record<string, number> {
  for (const k in add) {
    if (Object.hasOwn(add, k)) into[k] = roundAmount(amountOf(into, k) + (add[k] as number));
  }
  return into;
}

/** Takes `sub` from `into`, name by name (each difference rounded), and returns `into`. */
export function subtractAmounts(
  into: Record<string, number>,
  sub: Record<string, number>,
): Record<string, number> {
  for (const k in sub) {
    if (Object.hasOwn(sub, k)) into[k] = roundAmount(amountOf(into, k) - (sub[k] as number));
  }
  return into;
}

/** A copy of `amounts` with its names in one order (sorted): a sum's key order is the order
 *  it was summed in, which differs between a first execution (spend as reported) and a
 *  replay (as the store hands records back, jsonb's order on PostgreSQL). */
export function sortedAmounts(amounts: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of Object.keys(amounts).sort()) out[k] = amounts[k] as number;
  return out;
}

/** The amount under `name`, 0 when there is none (never an inherited property). */
export function amountOf(amounts: Record<string, number>, name: string): number {
  return Object.hasOwn(amounts, name) ? (amounts[name] as number) : 0;
}

/** Why `name` cannot name an amount, or undefined. "__proto__" would set an object's
 *  prototype instead of storing a number, and the amount would silently vanish. */
export function amountNameProblem(name: string): string | undefined {
  return name === "__proto__"
    ? `"__proto__" cannot name an amount; choose another name`
    : undefined;
}

const PLAIN = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 12, useGrouping: false });
const GROUPED = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 12 });

/** An amount as cairn writes it for people, the one format of a budget's reason, the CLI and
 *  the dashboard: the number itself, with the float noise of sums rounded away (0.1 + 0.2 is
 *  "0.3"), never padded or cut to a count of decimals ("0.001", not "0.0010"; "0.0123", not
 *  "0.01"), never in exponent form ("0.0000001"). `grouping`: thousands separated
 *  ("1,200"), for a dashboard's columns. A budget's paused reason said "usd 0.0100 of
 *  0.0050" where `cairn resume` said "usd 0.01 of 0.005". */
export function formatAmount(n: number, o: { grouping?: boolean } = {}): string {
  if (n === 0) return "0"; // not "-0"
  return (o.grouping ? GROUPED : PLAIN).format(n);
}
