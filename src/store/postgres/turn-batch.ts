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

type Answers<O> = Array<PromiseSettledResult<O>>;

/** Sends `items` with `send`, in rounds whose items have distinct keys: an item whose key
 *  is already in the round goes in the next one, after it (one run released twice in a
 *  turn: the second release sees the first). Answers in the order of `items`. */
export async function inDistinctRounds<I, O>(
  items: I[],
  keyOf: (item: I) => string,
  send: (round: I[]) => Promise<Answers<O>>,
): Promise<Answers<O>> {
  const answers: Answers<O> = new Array(items.length);
  let rest = items.map((item, i) => ({ item, i }));
  while (rest.length > 0) {
    const keys = new Set<string>();
    const round: typeof rest = [];
    const later: typeof rest = [];
    for (const e of rest) {
      const key = keyOf(e.item);
      if (keys.has(key)) later.push(e);
      else {
        keys.add(key);
        round.push(e);
      }
    }
    const got = await send(round.map((e) => e.item));
    round.forEach((e, k) => {
      answers[e.i] = got[k]!;
    });
    rest = later;
  }
  return answers;
}

/** Sends `items` together; if that throws an error `isAlone` picks (a value the database
 *  refused: the statement rolled back as a whole), sends each again on its own, so only
 *  the item at fault fails. Any other error is every item's. */
export async function isolatingFailures<I, O>(
  items: I[],
  together: (items: I[]) => Promise<O[]>,
  isAlone: (err: unknown) => boolean,
): Promise<Answers<O>> {
  try {
    const out = await together(items);
    return out.map((value) => ({ status: "fulfilled", value }));
  } catch (err) {
    if (items.length === 1 || !isAlone(err)) {
      return items.map(() => ({ status: "rejected", reason: err }));
    }
    const out: Answers<O> = [];
    for (const item of items) out.push(...(await isolatingFailures([item], together, isAlone)));
    return out;
  }
}
