// Calls a store is asked for in one turn of the event loop, handed over together: 32 runs
// ending at once become one statement and one commit instead of 32 (grouped releases,
// migration 13). Each caller still gets its own answer, or its own error.

/** The real setImmediate, taken when the module loads: a test's fake timers (which replace
 *  the global) must not hold back a store's writes. */
const scheduleFlush: (fn: () => void) => void = setImmediate;

interface Asked<I, O> {
  item: I;
  resolve: (o: O) => void;
  reject: (err: unknown) => void;
}

export class TurnBatch<I, O> {
  readonly #send: (items: I[]) => Promise<Array<PromiseSettledResult<O>>>;
  #queue: Array<Asked<I, O>> = [];
  #armed = false;
  readonly #inFlight = new Set<Promise<void>>();

  /** `send` answers each item in order; a rejection of `send` itself is every item's. */
  constructor(send: (items: I[]) => Promise<Array<PromiseSettledResult<O>>>) {
    this.#send = send;
  }

  ask(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.#queue.push({ item, resolve, reject });
      if (this.#armed) return;
      this.#armed = true;
      scheduleFlush(() => this.#flush());
    });
  }

  /** Sends what is queued now and waits until everything sent is answered. */
  async drain(): Promise<void> {
    this.#flush();
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
  }

  #flush(): void {
    this.#armed = false;
    const group = this.#queue;
    if (group.length === 0) return;
    this.#queue = [];
    const sent = this.#answer(group);
    this.#inFlight.add(sent);
    void sent.finally(() => this.#inFlight.delete(sent));
  }

  async #answer(group: Array<Asked<I, O>>): Promise<void> {
    let answers: Array<PromiseSettledResult<O>>;
    try {
      answers = await this.#send(group.map((g) => g.item));
      if (answers.length !== group.length) {
        throw new Error(`a batch of ${group.length} got ${answers.length} answers`);
      }
    } catch (err) {
      for (const g of group) g.reject(err);
      return;
    }
    group.forEach((g, i) => {
      const a = answers[i]!;
      if (a.status === "fulfilled") g.resolve(a.value);
      else g.reject(a.reason);
    });
  }
}
