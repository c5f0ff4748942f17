// The live end of runs' model streams, followed once per run for every client of this
// server: ten tabs on one streaming run cost one poll, not ten. A client first catches up
// on its own (api/model-stream.ts, at the pace its connection takes the writes), then
// follows the run's tail from the offset it reached. The tail looks at the stream
// (lookAtStream: a page, and once caught up whether the run has finished) from the lowest
// offset any follower needs, hands each follower the chunks from its own offset on, and
// says when the stream is over. It polls only while someone follows, and is dropped when
// the last one leaves.
//
// A follower that joins while a look is under way and needs an offset below the one
// looked at gets nothing from that look: the next one starts at its offset.

import { lookAtStream, type StreamSource } from "../../ai/run-stream.js";
import { type Engine, RunNotFoundError, type StreamChunk } from "../../index.js";
import { timerMs } from "../../lib/timers.js";
import { isEngineClosed } from "./hub.js";

export interface StreamFollower {
  /** The next offset this follower needs (the tail moves it on as it hands chunks over). */
  next: number;
  chunk(c: StreamChunk): void;
  /** The stream is over: the run finished with `status` ("deleted": it is gone). */
  end(status: string, next: number): void;
  /** The store cannot be read (ok false), or can again (ok true). */
  problem(ok: boolean): void;
  /** The engine has closed: nothing more will come (the follower is dropped). Without it,
   *  the follower hears problem(false). */
  engineClosed?(): void;
}

export interface StreamTailsOptions {
  engine: Engine;
  pollMs: number;
  log: (message: string) => void;
}

/** The tails of one app, by run id. */
export class StreamTails {
  private readonly tails = new Map<string, Tail>();
  private closed = false;

  constructor(private readonly o: StreamTailsOptions) {}

  /** Hands `f` the run's chunks from `f.next` on until the stream is over or the returned
   *  function is called; undefined once the app has closed. */
  follow(runId: string, f: StreamFollower): (() => void) | undefined {
    if (this.closed) return undefined;
    let tail = this.tails.get(runId);
    if (!tail) {
      const created = new Tail(runId, this.o, () => {
        if (this.tails.get(runId) === created) this.tails.delete(runId);
      });
      tail = created;
      this.tails.set(runId, created);
    }
    tail.add(f);
    const joined = tail;
    return () => joined.remove(f);
  }

  /** How many runs are followed (for tests). */
  get size(): number {
    return this.tails.size;
  }

  close(): void {
    this.closed = true;
    for (const t of this.tails.values()) t.close();
    this.tails.clear();
  }
}

class Tail {
  private readonly followers = new Set<StreamFollower>();
  private readonly source: StreamSource;
  private running = false;
  /** The offset the look under way started at. */
  private lookingFrom: number | undefined;
  /** A follower joined below it: look again without a pause. */
  private joinedBelow = false;
  private failing = false;
  private closed = false;
  private wake: (() => void) | undefined;

  constructor(
    runId: string,
    private readonly o: StreamTailsOptions,
    private readonly drop: () => void,
  ) {
    this.source = {
      read: (from, limit) => o.engine.readStream(runId, { from, limit }),
      status: async () => (await o.engine.getRun(runId))?.status,
    };
  }

  add(f: StreamFollower): void {
    this.followers.add(f);
    if (this.failing) f.problem(false);
    // A newcomer is looked for at once, not after the pause.
    if (this.lookingFrom !== undefined && f.next < this.lookingFrom) this.joinedBelow = true;
    this.wake?.();
    if (!this.running) void this.run();
  }

  remove(f: StreamFollower): void {
    this.followers.delete(f);
    if (this.followers.size === 0) this.wake?.();
  }

  close(): void {
    this.closed = true;
    this.followers.clear();
    this.wake?.();
  }

  private async run(): Promise<void> {
    this.running = true;
    try {
      while (this.followers.size > 0 && !this.closed) {
        this.joinedBelow = false;
        const more = await this.look();
        if (!more && !this.joinedBelow && this.followers.size > 0) await this.pause();
      }
    } finally {
      this.running = false;
      this.drop();
    }
  }

  /** One look; true when there is more to read at once. */
  private async look(): Promise<boolean> {
    const from = Math.min(...[...this.followers].map((f) => f.next));
    this.lookingFrom = from;
    try {
      const look = await lookAtStream(this.source, from);
      if (this.closed) return false;
      if (this.failing) {
        this.failing = false;
        for (const f of [...this.followers]) f.problem(true);
      }
      this.handOver(from, look.chunks);
      if (look.over !== undefined) this.end(from, look.over);
      return look.more || (look.over !== undefined && this.followers.size > 0);
    } catch (err) {
      if (err instanceof RunNotFoundError) {
        // Deleted meanwhile (retention): nothing more will come.
        this.end(from, "deleted");
      } else if (isEngineClosed(err)) {
        // Nothing can be read again: every follower is told and dropped, and the tail stops.
        for (const f of [...this.followers]) {
          this.followers.delete(f);
          if (f.engineClosed) f.engineClosed();
          else f.problem(false);
        }
      } else if (!this.failing) {
        this.failing = true;
        this.o.log(
          `model stream of a run: reading the store failed: ${(err as Error)?.message ?? String(err)}`,
        );
        for (const f of [...this.followers]) f.problem(false);
      }
      return false;
    } finally {
      this.lookingFrom = undefined;
    }
  }

  /** Each follower the look covered gets the chunks from its own offset on. */
  private handOver(from: number, chunks: StreamChunk[]): void {
    for (const f of [...this.followers]) {
      if (f.next < from) continue;
      for (const c of chunks) {
        if (c.offset < f.next || !this.followers.has(f)) continue;
        f.next = c.offset + 1;
        f.chunk(c);
      }
    }
  }

  /** Ends the stream of every follower the look covered (they have every chunk). */
  private end(from: number, status: string): void {
    for (const f of [...this.followers]) {
      if (f.next < from) continue;
      this.followers.delete(f);
      f.end(status, f.next);
    }
  }

  private async pause(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.wake = resolve;
      // timerMs: past 2^31-1 ms setTimeout fires after 1 ms (a poll every ms).
      const t = setTimeout(resolve, timerMs(this.o.pollMs));
      t.unref?.();
    });
    this.wake = undefined;
  }
}
