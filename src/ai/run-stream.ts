// A run's stream: the parts of its streamed model calls, forwarded as they arrive, so any
// process can show them while the run is live (the workflow itself sees a call's result
// only once it is recorded). The stream is a side channel in the store (appendStream /
// readStream), never part of the journal: replay does not read it, and the step's record
// stays the call's one result.
//
// Every chunk names its call (the step's idempotency key: stable across attempts and
// processes), the run's generation and its attempt. A call retried after an error or a
// crash streams again under a higher attempt number, and one made again after a resume of
// its failed run under a higher generation (where attempts start again at 1): a reader
// that shows text drops what it showed for that call's earlier (generation, attempt). Offsets count from 0 per run, so a reader that stopped (or
// crashed) at offset n resumes with `from: n + 1` and misses nothing.

import { runNotFound } from "../errors.js";
import type { RunStatus, Store, StreamChunk } from "../index.js";
import { timerMs } from "../lib/timers.js";
import { TERMINAL_STATUSES } from "../store-api.js";
import { addPart } from "./call-record.js";
import type { StreamPart } from "./sdk-types.js";

export interface RunStreamChunk {
  /** Position in the run's stream: resume after it with `from: offset + 1`. */
  offset: number;
  /** The model call (stable across its attempts and across processes). */
  call: string;
  /** The call's name, e.g. "model:gpt-4o". */
  name: string;
  /** The run's generation whose execution streamed this part (0 until a resume of a
   *  failed run; chunks written before cairn recorded it read as 0). */
  generation: number;
  /** The call's attempt that streamed this part (1-based, again from 1 in each
   *  generation). */
  attempt: number;
  part: StreamPart;
}

export interface ReadStreamOptions {
  /** First offset to read (default 0). */
  from?: number;
  /** Keep reading until the run has finished (default true); false reads what is there. */
  follow?: boolean;
  /** How often to look for new chunks while following (default 100 ms). */
  pollMs?: number;
  signal?: AbortSignal;
}

/** What every chunk of one attempt carries besides its part. */
export interface ChunkHeader {
  call: string;
  name: string;
  generation: number;
  attempt: number;
}

/** Whether a chunk of (generation, attempt) comes from a later execution of its call than
 *  one of (shownGeneration, shownAttempt): it replaces what that one showed. */
export function isLaterExecution(
  generation: number,
  attempt: number,
  shownGeneration: number,
  shownAttempt: number,
): boolean {
  return generation !== shownGeneration ? generation > shownGeneration : attempt > shownAttempt;
}

function encodeChunk(header: ChunkHeader, part: StreamPart) {
  return JSON.stringify({ ...header, part }, (_k, v) =>
    v instanceof Uint8Array ? { $bytes: Buffer.from(v).toString("base64") } : v,
  );
}

/** A stored chunk as readers get it (the HTTP API's model stream decodes with it too). */
export function decodeChunk(offset: number, data: string): RunStreamChunk {
  const c = JSON.parse(data, (_k, v) =>
    v && typeof v === "object" && typeof v.$bytes === "string" && Object.keys(v).length === 1
      ? new Uint8Array(Buffer.from(v.$bytes, "base64"))
      : v,
  ) as Omit<RunStreamChunk, "offset"> & { generation?: number };
  return { offset, ...c, generation: typeof c.generation === "number" ? c.generation : 0 };
}

type AppendStreamOutcome = Awaited<ReturnType<Store["appendStream"]>>;

/** Chunks waiting for a run's append in flight (its writers' batches, in arrival order),
 *  with what each batch's writer is told. */
interface RunAppends {
  waiting: Array<{
    chunks: string[];
    settle: (r: Promise<AppendStreamOutcome>) => void;
  }>;
}

const appendsByStore = new WeakMap<Store, Map<string, RunAppends>>();

/**
 * Appends `chunks` to the run's stream with at most one append of the run in flight from
 * this process (per store): batches that come while one is in flight (the run's other
 * streaming calls) go out together in the next. The store's append holds the run's row
 * (PostgreSQL: FOR SHARE, so a finish waits for it); appends that overlapped one another,
 * as parallel calls' did, held it without a gap, and a step's record, a lease renewal or
 * the run's release (each an update of that row) waited for as long as they streamed.
 */
function appendInTurn(store: Store, runId: string, chunks: string[]): Promise<AppendStreamOutcome> {
  let runs = appendsByStore.get(store);
  if (runs === undefined) {
    runs = new Map();
    appendsByStore.set(store, runs);
  }
  const queued = runs.get(runId);
  return new Promise<AppendStreamOutcome>((resolve) => {
    const entry = { chunks, settle: resolve };
    if (queued !== undefined) {
      queued.waiting.push(entry);
      return;
    }
    const appends: RunAppends = { waiting: [entry] };
    runs.set(runId, appends);
    void drainAppends(store, runId, runs, appends);
  });
}

/** One append, a store that throws at once (not an async method) answered as a rejection:
 *  a throw out of drainAppends would leave its batches unsettled and the run's queue stuck. */
function appendOnce(store: Store, runId: string, chunks: string[]): Promise<AppendStreamOutcome> {
  try {
    return store.appendStream({ runId, chunks });
  } catch (err) {
    return Promise.reject(err);
  }
}

async function drainAppends(
  store: Store,
  runId: string,
  runs: Map<string, RunAppends>,
  appends: RunAppends,
): Promise<void> {
  while (appends.waiting.length > 0) {
    const batches = appends.waiting.splice(0);
    const all = batches.flatMap((b) => b.chunks);
    const outcome = appendOnce(store, runId, all);
    // Each batch's first offset: the append's first plus the chunks before it.
    let before = 0;
    for (const b of batches) {
      const skip = before;
      b.settle(outcome.then((r) => (r.ok ? { ok: true, offset: r.offset + skip } : r)));
      before += b.chunks.length;
    }
    await outcome.catch(() => undefined);
  }
  runs.delete(runId);
}

/** Forwards one attempt's parts to the run's stream: parts that arrive while an append is
 *  in flight go out together in the next one, deltas of one block joined. */
export class RunStreamWriter {
  private pending: StreamPart[] = [];
  private flushing: Promise<void> | undefined;
  private failure: unknown;

  constructor(
    private readonly store: Store,
    private readonly runId: string,
    private readonly header: ChunkHeader,
  ) {}

  push(part: StreamPart): void {
    if (this.failure !== undefined) return;
    addPart(this.pending, part);
    this.flushing ??= this.flush();
  }

  /** Waits until every part pushed is stored; throws if an append failed. */
  async close(): Promise<void> {
    for (let f = this.flushing; f !== undefined; f = this.flushing) await f;
    if (this.failure !== undefined) throw this.failure;
  }

  private async flush(): Promise<void> {
    // Let parts that arrive in this turn of the event loop join the first append.
    await new Promise<void>((r) => setImmediate(r));
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.splice(0);
        const r = await appendInTurn(
          this.store,
          this.runId,
          batch.map((p) => encodeChunk(this.header, p)),
        );
        if (!r.ok && r.reason === "finished") {
          // Late (the call was recorded without them: its store was slow) or a zombie
          // worker's: the store refuses chunks once the run has finished, as its stream's
          // followers have ended; the rest of the attempt's parts are dropped with them.
          throw new Error(
            `run "${this.runId}" had finished when these parts of call "${this.header.call}" reached the store: dropped, not appended after its end`,
          );
        }
        if (!r.ok) {
          throw runNotFound(this.runId, "its stream was not written");
        }
      }
    } catch (err) {
      this.failure = err;
      this.pending = [];
    } finally {
      this.flushing = undefined;
    }
  }
}

/** Where a run's stream is read from: the store (here), or an Engine (the HTTP API). */
export interface StreamSource {
  /** Up to `limit` chunks from offset `from` on, in offset order. */
  read(from: number, limit: number): Promise<StreamChunk[]>;
  /** The run's status; undefined once the run is gone. */
  status(): Promise<RunStatus | undefined>;
}

export interface StreamLook {
  /** The chunks found, from the offset looked at. */
  chunks: StreamChunk[];
  /** More may already be there: look again at once. */
  more: boolean;
  /** The stream is over: the run finished with this status (or is gone: "deleted"), and
   *  `chunks` are its last ones. */
  over?: RunStatus | "deleted";
}

/** A page of the stream, at most. */
export const STREAM_PAGE = 500;

/**
 * One look at a run's stream from offset `from`: a page of chunks and, once the reader has
 * caught up and `follow` asks, whether the stream is over. The one rule every follower of a
 * stream keeps (readRunStream here, the HTTP API's live model stream): every chunk was
 * appended before the run finished (the store refuses an append once the run has finished,
 * atomically with it: Store.appendStream), so after a finished status one more read drains
 * them.
 */
export async function lookAtStream(
  source: StreamSource,
  from: number,
  follow = true,
): Promise<StreamLook> {
  const chunks = await source.read(from, STREAM_PAGE);
  if (chunks.length === STREAM_PAGE) return { chunks, more: true };
  if (!follow) return { chunks, more: false };
  const status = await source.status();
  if (status !== undefined && !TERMINAL_STATUSES.has(status)) return { chunks, more: false };
  const rest = await source.read(nextOffset(chunks, from), STREAM_PAGE);
  if (rest.length > 0) return { chunks: [...chunks, ...rest], more: true };
  return { chunks, more: false, over: status ?? "deleted" };
}

/** The offset after the last of `chunks` (read from `from`). */
export function nextOffset(chunks: StreamChunk[], from: number): number {
  return chunks.length > 0 ? chunks[chunks.length - 1]!.offset + 1 : from;
}

/** The run's stream from `from` on; with `follow`, until the run has finished. */
export async function* readRunStream(
  store: Store,
  runId: string,
  options: ReadStreamOptions = {},
): AsyncGenerator<RunStreamChunk> {
  let from = options.from ?? 0;
  const follow = options.follow ?? true;
  const source: StreamSource = {
    read: (start, limit) => store.readStream({ runId, from: start, limit }),
    status: async () => (await store.getRun(runId))?.status,
  };
  for (;;) {
    options.signal?.throwIfAborted();
    const look = await lookAtStream(source, from, follow);
    for (const c of look.chunks) {
      yield decodeChunk(c.offset, c.data);
      from = c.offset + 1;
    }
    if (look.over === "deleted") throw runNotFound(runId, "it has no stream");
    if (look.over !== undefined) return;
    if (look.more) continue;
    if (!follow) return;
    await pause(options.pollMs ?? 100, options.signal);
  }
}

/** Real time: a reader's polling pace, not workflow time. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    // Past 2^31 - 1 ms setTimeout fires at once: a poll may come early, never every ms.
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, timerMs(ms));
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
