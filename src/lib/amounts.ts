// Named amounts ({ tokens: 1200, usd: 0.03 }) are summed in the engine (spend per run,
// per step, per replay point) and in both stores (budget spent): one definition.

/** Adds `add` into `into`, name by name, and returns `into`. */
export function addAmounts(
  into: Record<string, number>,
  add: Record<string, number>,
): Record<string, number> {
  for (const [k, v] of Object.entries(add)) into[k] = (into[k] ?? 0) + v;
  return into;
}
