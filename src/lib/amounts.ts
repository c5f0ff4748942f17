// Named amounts ({ tokens: 1200, usd: 0.03 }) are summed in the engine (spend per run,
// per step, per replay point) and in both stores (budget spent): one definition. And written
// for people one way (formatAmount): a budget's reason, the CLI and the dashboard.
//
// Own properties only, as Object.entries would give them, but read with for-in: the engine
// sums amounts several times per step and nearly all of them are empty, and Object.entries
// allocates an array for each even then. The sum reads `into` by own property too: a name
// such as "constructor" or "toString" is an amount like any other, not Object.prototype's.

/** Adds `add` into `into`, name by name, and returns `into`. */
export function addAmounts(
  into: Record<string, number>,
  add: Record<string, number>,
): Record<string, number> {
  for (const k in add) {
    if (Object.hasOwn(add, k)) into[k] = amountOf(into, k) + (add[k] as number);
  }
  return into;
}

/** Takes `sub` from `into`, name by name, and returns `into`. */
export function subtractAmounts(
  into: Record<string, number>,
  sub: Record<string, number>,
): Record<string, number> {
  for (const k in sub) {
    if (Object.hasOwn(sub, k)) into[k] = amountOf(into, k) - (sub[k] as number);
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
