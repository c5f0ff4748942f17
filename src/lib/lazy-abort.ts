// An abort signal made only when someone asks for it. A step attempt offers one to its body,
// and most bodies never read it: an AbortController per attempt showed in a per-step profile.

/** An attempt's abort signal, made only if the body asks for it: an abort before that is
 *  kept and the signal is born aborted with its reason. */
export class LazyAbort {
  private controller: AbortController | undefined;
  private reason: unknown;
  private aborted = false;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
  }
}
