// An in-process stand-in for SIGKILL, as a Store decorator: once `crash()` is called the
// engine using this store is dead as far as the storage can tell. Every store call it makes
// from then on never settles, and calls already in flight never report back (a write the
// inner store already committed stays committed, as with a process killed right after its
// commit). Nothing is released, no lease is handed back, no hint reaches the engine, and the
// inner store is closed so its connections go away. Another engine on the same storage takes
// the run over once its lease runs out (advance a virtual clock past `leaseMs`), exactly as
// after a real kill; fencing makes any write the dead engine still had on the wire harmless.
//
// It is much faster than killing a process, so crash sweeps can run thousands of crash
// points. Crash points: call `crash()` from anywhere (a step body, a timer, a ledger hook),
// or let `crashBefore` / `crashAfter` pick a store call: before it runs (it never happens)
// or after it committed (the engine never learns it did).
//
// A write on the wire at the crash lands (or fails) a little later, as a killed process's
// last COMMIT may: `settled()` waits for that, so whoever inspects the storage after a crash
// (a harness noting what the crash left) sees it as the next engine will.
//
// What it cannot do: stop the dead engine's JavaScript. Workflow code and step bodies of the
// dead engine keep running in memory, unable to record anything; a harness that counts side
// effects must ignore what happens after the crash (e.g. by checking a flag it sets together
// with `crash()`).

import type { Store, StoreHint } from "../store/store.js";

export interface StoreCall {
  verb: keyof Store;
  args: unknown[];
  /** 1-based count of calls of this store so far, this one included. */
  n: number;
}

export interface CrashableStoreOptions {
  /** Return true to crash right before this call runs (it never reaches the inner store). */
  crashBefore?: (call: StoreCall) => boolean;
  /** Return true to crash right after this call settled in the inner store (committed, if
   *  a write), before the engine sees its result. */
  crashAfter?: (call: StoreCall, result: unknown) => boolean;
  /** Called once, synchronously, when the store crashes (whatever made it crash). */
  onCrash?: () => void;
}

export interface CrashableStore extends Store {
  /** Stops this store dead, at once: see the file header. Calling it twice is harmless. */
  crash(): void;
  readonly crashed: boolean;
  /** Store calls made so far (every verb except subscribe). */
  readonly calls: number;
  /** After `crash()`: resolves once every call that reached the inner store before the crash
   *  has settled there (committed or failed) and the inner store is closed: from then on the
   *  storage is as the crash left it. Before `crash()`: rejects (the engine still writes). */
  settled(): Promise<void>;
}

function never<T>(): Promise<T> {
  return new Promise<T>(() => {});
}

export function crashableStore(inner: Store, options: CrashableStoreOptions = {}): CrashableStore {
  let crashed = false;
  let calls = 0;
  let opened: Promise<unknown> | undefined;
  let closed: Promise<void> | undefined;
  /** Calls under way in the inner store (their outcome ignored once crashed). */
  const inFlight = new Set<Promise<unknown>>();
  const unsubscribers = new Set<() => void>();

  function crash(): void {
    if (crashed) return;
    crashed = true;
    for (const u of unsubscribers) u();
    unsubscribers.clear();
    options.onCrash?.();
    // Free the connection (file handle or pool) once any open in flight has settled. The
    // engine never sees this: its calls all hang.
    closed = (async () => {
      if (!opened) return;
      try {
        await opened;
      } catch {
        return;
      }
      await inner.close().catch(() => {});
    })();
  }

  async function settled(): Promise<void> {
    if (!crashed) throw new Error("crashableStore: settled() is for after crash()");
    // A call never started after the crash, so the set only shrinks.
    while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
    await closed;
  }

  const handler: ProxyHandler<Store> = {
    get(target, prop, receiver) {
      if (prop === "crash") return crash;
      if (prop === "settled") return settled;
      if (prop === "crashed") return crashed;
      if (prop === "calls") return calls;
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      const verb = prop as keyof Store;
      if (verb === "subscribe") {
        return (listener: (hint: StoreHint) => void) => {
          if (crashed) return () => {};
          const unsubscribe = target.subscribe((hint) => {
            if (!crashed) listener(hint);
          });
          unsubscribers.add(unsubscribe);
          return () => {
            unsubscribers.delete(unsubscribe);
            unsubscribe();
          };
        };
      }
      return (...args: unknown[]) => {
        if (crashed) return never();
        calls++;
        const call: StoreCall = { verb, args, n: calls };
        if (options.crashBefore?.(call)) {
          crash();
          return never();
        }
        const p = Promise.resolve((value as (...a: unknown[]) => unknown).apply(target, args));
        if (verb === "open") opened = p;
        inFlight.add(p);
        const done = () => inFlight.delete(p);
        p.then(done, done);
        return p.then(
          (result) => {
            if (!crashed && options.crashAfter?.(call, result)) crash();
            return crashed ? never() : result;
          },
          (err: unknown) => (crashed ? never() : Promise.reject(err)),
        );
      };
    },
  };
  return new Proxy(inner, handler) as CrashableStore;
}
