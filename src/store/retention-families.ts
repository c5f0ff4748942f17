// Retention never deletes a run whose child run would outlive it: the child's id is derived
// from the parent's, so a run started later under the parent's id (a new run, once the old
// one is gone) would find that child and adopt it, or fail on its other input.

/** The ids of `finished` that may go now: none of their children stays behind (a child
 *  goes with them only if it is in `finished` itself, transitively). */
export function deletableWithChildren(
  finished: readonly string[],
  children: ReadonlyArray<{ id: string; parentId: string }>,
): string[] {
  const keep = new Set(finished);
  for (let changed = true; changed; ) {
    changed = false;
    for (const c of children) {
      if (keep.has(c.parentId) && !keep.has(c.id)) {
        keep.delete(c.parentId);
        changed = true;
      }
    }
  }
  return finished.filter((id) => keep.has(id));
}
