// Live updates behind the Server-Sent Events routes, by polling the store.
//
// A Feed reads some state (a run with its steps and events, a page of runs, the workers)
// and says which events take a client from one reading to the next. A Watcher polls one
// feed for all the streams that watch the same thing (ten tabs on one run cost one poll),
// numbers its events, and keeps the last ones in a ring. Event ids are
// "<watcher instance>.<seq>": a client that reconnects with Last-Event-ID gets exactly the
// events after that one from the ring when this watcher still has them; otherwise (another
// process, a restarted server, a ring that moved on) it gets a fresh snapshot. Either way
// it ends up where the others are, and nothing in between is lost.
//
// A client that fell further behind than MAX_REPLAY_BYTES (a stream cut off because it did
// not take its events, see api/sse.ts) gets a snapshot rather than the replay: a replay
// that large would pass the stream's backlog limit and be cut off again.
//
// A watcher polls only while someone listens; it lingers (without polling) for a while
// after the last one leaves, so a reconnect finds its ring, then it is dropped.

import { randomBytes } from "node:crypto";
import { CairnError } from "../../index.js";
import { timerMs } from "../../lib/timers.js";
import { MAX_REPLAY_BYTES } from "./backlog.js";

export interface LiveMessage {
  event: string;
  data: unknown;
}

export interface LiveEvent extends LiveMessage {
  /** Absent for notices that are not part of the state (a store problem). */
  id?: string;
}

export interface Feed<S> {
  /** The state now; `prev`, the last reading, lets a feed read only what can have changed
   *  since (absent: read everything). A reading that fails changes nothing. */
  read(prev?: S): Promise<S>;
  /** The whole state as one message (sent first to a client that cannot replay). */
  snapshot(state: S): LiveMessage;
  /** The messages that take a client from `prev` to `next`, in order. */
  changes(prev: S, next: S): LiveMessage[];
}

export interface HubOptions {
  pollMs: number;
  /** Events kept per watcher for reconnects. Default 500. */
  ringSize?: number;
  /** How long a watcher nobody listens to keeps its ring. Default 60 s. */
  lingerMs?: number;
  /** The most (JSON bytes of data) replayed to a reconnecting client; further behind, it
   *  gets a snapshot. Default MAX_REPLAY_BYTES. */
  replayBytes?: number;
  log: (message: string) => void;
}

type Listener = (e: LiveEvent) => void;

const STORE_FAILING = { ok: false, message: "The store cannot be read; retrying" };

/** Whether `err` says the engine behind the app has closed: nothing can be read through it
 *  again, so retrying is pointless (the API answers 503 ENGINE_CLOSED meanwhile). */
export function isEngineClosed(err: unknown): boolean {
  return err instanceof CairnError && err.code === "ENGINE_CLOSED";
}

/** The last event of a live stream whose engine has closed: the stream ends after it (a
 *  client reconnects, to another instance if there is one). */
export const ENGINE_CLOSED_PROBLEM = {
  ok: false,
  final: true,
  message: "This server's engine has closed (it is shutting down): nothing more will come here",
};

class Watcher<S> {
  readonly instance = randomBytes(6).toString("base64url");
  private seq = 0;
  private readonly ring: Array<{ seq: number; event: LiveEvent; bytes: number }> = [];
  private state: S | undefined;
  private loading: Promise<S> | undefined;
  private readonly listeners = new Set<Listener>();
  private timer: NodeJS.Timeout | undefined;
  private lingerTimer: NodeJS.Timeout | undefined;
  /** The poll in flight, if any. */
  private polling: Promise<void> | undefined;
  private failing = false;
  private closed = false;
  /** The error that said the engine has closed (a poll found it). */
  private closedBy: unknown;

  constructor(
    private readonly feed: Feed<S>,
    private readonly o: Required<Omit<HubOptions, "log">> & Pick<HubOptions, "log">,
    private readonly drop: () => void,
  ) {}

  /** Sends `listener` what it missed (or a snapshot), then every new event. */
  async subscribe(lastEventId: string | undefined, listener: Listener): Promise<() => void> {
    // A lingering watcher holds what it read before everyone left, maybe long ago: it polls
    // once first (its changes go to the ring, as any poll's), so a newcomer's snapshot is
    // not older than the page it came from, and a returning client gets what it missed.
    const stale = this.lingerTimer !== undefined && this.state !== undefined;
    if (this.lingerTimer) clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
    // Counted at once, so the watcher is not dropped while the first reading is made.
    const placeholder: Listener = () => {};
    this.listeners.add(placeholder);
    try {
      if (this.state === undefined) {
        this.loading ??= this.feed.read();
        const loading = this.loading;
        try {
          this.state ??= await loading;
        } finally {
          if (this.loading === loading) this.loading = undefined;
        }
      } else if (stale || this.polling !== undefined) {
        // A poll in flight may be the one made for an earlier newcomer: what the watcher
        // holds until it ends is the reading from before everyone left.
        await this.poll();
        if (this.closedBy !== undefined) throw this.closedBy;
      }
    } catch (err) {
      this.leave(placeholder);
      throw err;
    }
    // From here to the end nothing awaits: no event can slip between catch-up and live.
    this.listeners.delete(placeholder);
    const last = this.parse(lastEventId);
    const first = this.ring[0]?.seq ?? this.seq + 1;
    const missed = last === undefined ? [] : this.ring.filter((r) => r.seq > last);
    const missedBytes = missed.reduce((sum, r) => sum + r.bytes, 0);
    if (
      last !== undefined &&
      last <= this.seq &&
      last >= first - 1 &&
      missedBytes <= this.o.replayBytes
    ) {
      for (const r of missed) listener(r.event);
    } else {
      listener({ id: this.id(this.seq), ...this.feed.snapshot(this.state) });
    }
    // A newcomer learns that the store cannot be read now, as those already here did: what
    // it was just sent is the last reading, not the store's present.
    if (this.failing) listener({ event: "problem", data: STORE_FAILING });
    this.listeners.add(listener);
    this.schedule();
    return () => this.leave(listener);
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.lingerTimer) clearTimeout(this.lingerTimer);
    this.listeners.clear();
  }

  private id(seq: number): string {
    return `${this.instance}.${seq}`;
  }

  private parse(lastEventId: string | undefined): number | undefined {
    if (lastEventId === undefined) return undefined;
    const dot = lastEventId.lastIndexOf(".");
    if (dot < 0 || lastEventId.slice(0, dot) !== this.instance) return undefined;
    const seq = Number(lastEventId.slice(dot + 1));
    return Number.isSafeInteger(seq) && seq >= 0 ? seq : undefined;
  }

  private leave(listener: Listener): void {
    this.listeners.delete(listener);
    if (this.listeners.size > 0 || this.closed) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.lingerTimer = setTimeout(() => {
      if (this.listeners.size === 0) {
        this.close();
        this.drop();
      }
    }, this.o.lingerMs);
    this.lingerTimer.unref?.();
  }

  private schedule(): void {
    if (this.timer || this.polling !== undefined || this.closed || this.listeners.size === 0)
      return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.poll();
      // Past 2^31-1 ms setTimeout fires after 1 ms: a poll may come early, never every ms.
    }, timerMs(this.o.pollMs));
    this.timer.unref?.();
  }

  /** Reads the store once, or joins the reading in flight. */
  private poll(): Promise<void> {
    this.polling ??= this.readChanges().finally(() => {
      this.polling = undefined;
      this.schedule();
    });
    return this.polling;
  }

  private async readChanges(): Promise<void> {
    try {
      const next = await this.feed.read(this.state);
      if (this.closed) return;
      if (this.failing) {
        this.failing = false;
        this.notify({ event: "problem", data: { ok: true } });
      }
      const prev = this.state;
      this.state = next;
      const messages = prev === undefined ? [] : this.feed.changes(prev, next);
      for (const m of messages) {
        this.seq += 1;
        const event: LiveEvent = { id: this.id(this.seq), event: m.event, data: m.data };
        const bytes = Buffer.byteLength(JSON.stringify(m.data) ?? "");
        this.ring.push({ seq: this.seq, event, bytes });
        if (this.ring.length > this.o.ringSize) this.ring.shift();
        this.notify(event);
      }
    } catch (err) {
      if (isEngineClosed(err)) {
        // Every stream is told, and ends (api/live.ts); this watcher stops polling.
        this.closedBy = err;
        this.notify({ event: "problem", data: ENGINE_CLOSED_PROBLEM });
        this.close();
        this.drop();
        return;
      }
      if (!this.failing) {
        this.failing = true;
        this.o.log(
          `live updates: reading the store failed: ${(err as Error)?.message ?? String(err)}`,
        );
        this.notify({ event: "problem", data: STORE_FAILING });
      }
    }
  }

  private notify(e: LiveEvent): void {
    for (const l of [...this.listeners]) {
      try {
        l(e);
      } catch {
        // A listener whose stream broke is removed by its own abort handler.
      }
    }
  }
}

/** The watchers of one app, by what they watch. */
export class LiveHub {
  private readonly watchers = new Map<string, Watcher<unknown>>();
  private readonly o: Required<Omit<HubOptions, "log">> & Pick<HubOptions, "log">;
  private readonly closers = new Set<() => void>();
  private closed = false;

  constructor(options: HubOptions) {
    this.o = { ringSize: 500, lingerMs: 60_000, replayBytes: MAX_REPLAY_BYTES, ...options };
  }

  subscribe<S>(
    key: string,
    makeFeed: () => Feed<S>,
    lastEventId: string | undefined,
    listener: Listener,
  ): Promise<() => void> {
    if (this.closed) return Promise.reject(new Error("live updates are closed"));
    let w = this.watchers.get(key) as Watcher<S> | undefined;
    if (!w) {
      const created: Watcher<S> = new Watcher(makeFeed(), this.o, () => {
        if (this.watchers.get(key) === created) this.watchers.delete(key);
      });
      w = created;
      this.watchers.set(key, created as Watcher<unknown>);
    }
    return w.subscribe(lastEventId, listener);
  }

  /** Registers what ends a stream when the hub closes. */
  onClose(fn: () => void): () => void {
    this.closers.add(fn);
    return () => this.closers.delete(fn);
  }

  /** How many watchers exist (for tests). */
  get size(): number {
    return this.watchers.size;
  }

  close(): void {
    this.closed = true;
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
    for (const fn of [...this.closers]) fn();
    this.closers.clear();
  }
}
