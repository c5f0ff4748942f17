// An abort signal made only when someone asks for it. A step attempt offers one to its body,
// and most bodies never read it: an AbortController per attempt showed in a per-step profile.
// A run's own abort works the same way: its signal is made only if the workflow reads
// ctx.signal, and cairn's own code listens through `onAbort` (a Set, not an EventTarget:
// adding and removing an EventTarget listener per attempt showed in the same profile).

import { setMaxListeners } from "node:events";

/** An abort signal made only if asked for: an abort before that is kept and the signal is
 *  born aborted with its reason. */
export class LazyAbort {
  private controller: AbortController | undefined;
  private abortReason: unknown;
  private wasAborted = false;
  private listeners: Set<() => void> | undefined;

  /** `unlimitedListeners`: the signal takes any number of listeners without Node's leak
   *  warning (a run's signal, heard by each of an agent's many parallel tool calls). */
  constructor(private readonly options: { unlimitedListeners?: boolean } = {}) {}

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.options.unlimitedListeners) setMaxListeners(0, this.controller.signal);
      if (this.wasAborted) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  get aborted(): boolean {
    return this.wasAborted;
  }

  /** The first abort's reason (undefined before any). */
  get reason(): unknown {
    return this.abortReason;
  }

  /** Calls `fn` once, at the abort (not if already aborted: ask `aborted` first). Returns
   *  the function that stops listening. */
  onAbort(fn: () => void): () => void {
    this.listeners ??= new Set();
    const listeners = this.listeners;
    listeners.add(fn);
    return () => listeners.delete(fn);
  }

  abort(reason: unknown): void {
    if (this.wasAborted) return;
    this.wasAborted = true;
    this.abortReason = reason;
    this.controller?.abort(reason);
    const listeners = this.listeners;
    this.listeners = undefined;
    for (const fn of listeners ?? []) fn();
  }
}
