// How much a live stream may hold that its client has not taken yet. A client that keeps
// its connection open but does not read (a stalled tab, a proxy that buffers nothing, a
// hostile client) would otherwise make the server queue every event for it, without end.

/** Unsent bytes a stream may queue before it is cut off. */
export const MAX_BACKLOG_BYTES = 4 * 1024 * 1024;
/** The most a watcher replays to a client that reconnects (hub.ts): one further behind
 *  gets a fresh snapshot instead. Below the backlog's limit, so the replay itself never
 *  cuts the stream off again (which would leave the client reconnecting without end). */
export const MAX_REPLAY_BYTES = MAX_BACKLOG_BYTES / 2;
/** Unsent events (and pings) a stream may queue before it is cut off: many small events
 *  cost memory beyond their bytes. */
export const MAX_BACKLOG_EVENTS = 10_000;

/** The writes queued on one stream and not yet taken by its client. */
export class Backlog {
  private queued = 0;
  private writes = 0;

  constructor(
    private readonly maxBytes = MAX_BACKLOG_BYTES,
    private readonly maxWrites = MAX_BACKLOG_EVENTS,
  ) {}

  add(bytes: number): void {
    this.queued += bytes;
    this.writes += 1;
  }

  remove(bytes: number): void {
    this.queued -= bytes;
    this.writes -= 1;
  }

  get bytes(): number {
    return this.queued;
  }

  isEmpty(): boolean {
    return this.writes === 0;
  }

  /** Whether queuing `bytes` more passes a limit. One write alone never does, however
   *  large (a big snapshot to a client that takes it): the limits bound what waits behind
   *  the write under way. */
  wouldOverflow(bytes: number): boolean {
    if (this.writes === 0) return false;
    return this.queued + bytes > this.maxBytes || this.writes + 1 > this.maxWrites;
  }
}
