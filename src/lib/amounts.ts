// Named amounts ({ tokens: 1200, usd: 0.03 }) are summed in the engine (spend per run,
// per step, per replay point) and in both stores (budget spent): one definition.
//
// Own properties only, as Object.entries would give them, but read with for-in: the engine
// sums amounts several times per step and nearly all of them are empty, and Object.entries
// allocates an array for each even then.

/** Adds `add` into `into`, name by name, and returns `into`. */
export function addAmounts(
  into: Record<string, number>,
  add: Record<string, number>,
): Record<string, number> {
  for (const k in add) {
    if (Object.hasOwn(add, k)) into[k] = (into[k] ?? 0) + (add[k] as number);
  }
  return into;
}

/** Takes `sub` from `into`, name by name, and returns `into`. */
export function subtractAmounts(
  into: Record<string, number>,
  sub: Record<string, number>,
): Record<string, number> {
  for (const k in sub) {
    if (Object.hasOwn(sub, k)) into[k] = (into[k] ?? 0) - (sub[k] as number);
  }
  return into;
}
