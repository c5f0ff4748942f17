// A value whose parts may lead back to it (an Error whose `error` property is the Error,
// as `execFileSync` of a missing binary makes it; a regex match array holding itself) is
// revived in place: devalue revives a tagged value from its parts, and reaching the value
// again while its parts are revived calls the reviver a second time, on the parts array
// revived so far. That call makes the value, empty, and hands it to the part that leads
// back; the reviver's own call, once the parts are whole, fills the same value in. So both
// places hold one object, as the value stored did.

/** The value made for each parts array (a parts array belongs to one stored value). */
const made = new WeakMap<unknown[], object>();

/** Whether every one of the `size` parts is revived (a part not revived yet is a hole). */
function whole(parts: unknown[], size: number): boolean {
  for (let i = 0; i < size; i++) if (!(i in parts)) return false;
  return true;
}

/** The value `parts` stand for: `make(parts)` the first time (the parts may not be whole
 *  yet: it makes what it can of those that are), and `fill(value, parts)` once they are. */
export function revivedInPlace<T extends object>(
  parts: unknown[],
  size: number,
  make: (parts: unknown[]) => T,
  fill: (value: T, parts: unknown[]) => void,
): T {
  if (!Array.isArray(parts)) throw new Error("Invalid input");
  let value = made.get(parts) as T | undefined;
  if (value === undefined) {
    value = make(parts);
    made.set(parts, value);
  }
  if (whole(parts, size)) fill(value, parts);
  return value;
}

/** Whether `parts` are whole: an older tag's reviver is called on parts not whole only when
 *  the value leads back to itself (which it cannot revive). */
export function partsWhole(parts: unknown, size: number): boolean {
  return Array.isArray(parts) && whole(parts, size);
}
