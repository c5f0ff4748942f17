// The run's pending events as one execution reads them from a store that reads them by name
// (Store.pendingEventHeadsNamed): only the names the run's calls take events of, a page of
// heads at a time, oldest first. A run sent 100,000 events it does not wait for (a flood from
// a webhook, a queue it takes from one at a time) reads none of them: an execution's cost is
// the events it takes, not the events it was sent.
//
// What a take sees is what it saw when every pending event was read at the start: the
// oldest event of its name (past a deadline, the oldest stored by then), and takes go in
// the order they were called, whatever reads some of them waited for (a take that needs no
// read waits behind an earlier one that does). Each name is read from the first pending
// event on, then page by page while a take finds nothing in what was read and more is
// stored; events sent during the execution are read past the last seq read of each name
// read to its end, as a store offering the verb makes a run's events visible in seq order:
// at the last look after a wait's deadline every such name, at a hint only the names waits
// are blocked on (the others are marked stale, and read on when a take of them finds
// nothing). Reads go one after another, each from where the one before left its names.

import type { EventHead, EventHeadsPage } from "../store/store.js";

/** How many heads of one name one read takes. */
export const EVENT_HEADS_PAGE = 100;

export interface EventReadsHost {
  /** A page of heads of one name (Store.pendingEventHeadsNamed); `settled` as the last look
   *  after a deadline asks (Store.pendingEvents). */
  read(page: EventHeadsPage, settled: boolean): Promise<EventHead[]>;
  /** Pages of several names in one read (Store.pendingEventHeadsOfNames); absent: a read
   *  of each page, side by side. */
  readMany?(pages: readonly EventHeadsPage[], settled: boolean): Promise<EventHead[]>;
  /** Names read with the first read, whatever it reads: those the run's journal says its
   *  calls will take (the results of the children it began and holds unfinished), so a
   *  parent replayed after N children ended reads them in one call, not one each. */
  along?(): readonly string[];
  /** Hands heads read to the execution (Context.addEvents: each taken once, in seq order per
   *  name, waking the waits blocked on their names). */
  add(heads: EventHead[]): void;
  /** Whether a take of `name` (past `deadline`, an event stored by then) would find an event
   *  among the heads handed over and not taken. */
  takeable(name: string, deadline: number | null): boolean;
}

/** What has been read of one name. */
interface NameRead {
  /** The highest seq read (0: none yet). */
  readTo: number;
  /** The last read found no more: every pending event of the name up to then is read. */
  whole: boolean;
  /** Read to its end, but not read again at a hint since (no wait was blocked on it): a
   *  take that finds nothing of it reads past `readTo` first. */
  stale?: boolean;
}

export class EventReads {
  private readonly names = new Map<string, NameRead>();
  private queue: Promise<unknown> = Promise.resolve();
  /** Takes queued behind reads (whenReady), not yet handed their event. */
  private queuedTakes = 0;
  /** The first read took the host's `along` names. */
  private alongRead = false;

  constructor(private readonly host: EventReadsHost) {}

  /** Whether a take of `name` can be answered now from what is read, in its call's turn
   *  (no take called before it waits for a read). */
  ready(name: string, deadline: number | null): boolean {
    return this.queuedTakes === 0 && this.enough(name, deadline);
  }

  /** Runs `take` once what is read of `name` answers it, after the takes queued before. */
  whenReady<T>(name: string, deadline: number | null, take: () => T): Promise<T> {
    this.queuedTakes++;
    const run = this.enqueue(async () => {
      while (!this.enough(name, deadline)) await this.readNames([name], false);
      return take();
    });
    return run.finally(() => {
      this.queuedTakes--;
    });
  }

  /** Reads past its last seq every name read to its end: events sent since (a hint, the
   *  last look after a deadline, `settled`). A name with more pending is read on when a take
   *  reaches its end. `only` (a hint): just the names it gives when the read begins (those
   *  waits are blocked on then, after the takes queued before); the other names read to
   *  their end are marked stale, and read on when a take finds nothing of them: reading
   *  every name ever read at every hint cost an execution that waited on N names one after
   *  another (a loop of named waits, a parent's N children) about N^2/2 reads. */
  reload(settled: boolean, only?: () => ReadonlySet<string>): Promise<void> {
    return this.enqueue(() => {
      const names: string[] = [];
      const wanted = only?.();
      for (const [name, r] of this.names) {
        if (!r.whole) continue;
        if (wanted === undefined || wanted.has(name)) names.push(name);
        else r.stale = true;
      }
      return this.readNames(names, settled);
    });
  }

  /** How many names have been read (for tests and diagnostics). */
  get namesRead(): number {
    return this.names.size;
  }

  private enough(name: string, deadline: number | null): boolean {
    const read = this.names.get(name);
    return (
      read !== undefined && ((read.whole && !read.stale) || this.host.takeable(name, deadline))
    );
  }

  private enqueue<T>(op: () => Promise<T>): Promise<T> {
    const run = this.queue.then(op);
    this.queue = run.catch(() => {});
    return run;
  }

  /** Reads the next page of each name, all of them before any is handed over (the waits
   *  they wake are woken together, as one read of every event woke them): in one call when
   *  the host reads several names at once. The first read takes the `along` names too. */
  private async readNames(asked: string[], settled: boolean): Promise<void> {
    if (asked.length === 0) return;
    let names = asked;
    if (!this.alongRead) {
      this.alongRead = true;
      const all = new Set(asked);
      for (const name of this.host.along?.() ?? []) if (!this.names.has(name)) all.add(name);
      names = [...all];
    }
    const wanted = names.map((name) => ({
      name,
      after: this.names.get(name)?.readTo ?? 0,
      limit: EVENT_HEADS_PAGE,
    }));
    let pages: EventHead[][];
    if (names.length > 1 && this.host.readMany) {
      const at = new Map(names.map((name, i) => [name, i]));
      pages = names.map(() => []);
      const heads = await this.host.readMany(wanted, settled);
      for (const h of heads) pages[at.get(h.name) ?? -1]?.push(h);
    } else {
      pages = await Promise.all(wanted.map((page) => this.host.read(page, settled)));
    }
    const heads: EventHead[] = [];
    names.forEach((name, i) => {
      const page = pages[i]!;
      let read = this.names.get(name);
      if (!read) {
        read = { readTo: 0, whole: false };
        this.names.set(name, read);
      }
      for (const h of page) if (h.seq > read.readTo) read.readTo = h.seq;
      read.whole = page.length < EVENT_HEADS_PAGE;
      read.stale = false;
      for (const h of page) heads.push(h);
    });
    this.host.add(heads);
  }
}
