// ctx.workspace(): a directory that is part of a run's durable state.
//
// Exactness rules (docs/ARCHITECTURE.md, "Workspaces"):
// - A checkpoint is named in the record of the step that made it: a workspace step's
//   recorded value carries the root hash of the tree it left, and its objects are stored
//   (with the run's refs to them) before the step body returns, so before its record is
//   written. A step record never names a checkpoint the store does not hold, and a
//   checkpoint without a record is just unreferenced by the journal (kept until its run is
//   deleted).
// - Opening a workspace is itself a recorded step ("workspace:<name>"): the directory's
//   content when it is first opened is its base, restored like any checkpoint.
// - Steps of one workspace run one at a time, in call order (each waits for the previous
//   one's outcome to be handed over), so each starts from the checkpoint of the one before
//   it, on every execution: the "current" checkpoint follows the recorded outcomes as the
//   replay hands them over.
// - Before a workspace step's body runs, and before any other call starts executing, a
//   directory that is not known to hold the current checkpoint is restored to it (after a
//   resume, on another machine, after a failed attempt). A step that throws, times out or
//   returns something unstorable leaves it to be restored; the body's own rollback does it
//   at once. So a run sees the same directory on its first execution and on every resume.
// - Changes made to the directory outside workspace steps are not part of the state: the
//   next restore undoes them (first run and resume alike).

import { realpathSync } from "node:fs";
import { chmod, lstat, mkdir, readdir, rmdir, unlink, writeFile } from "node:fs/promises";
import {
  basename,
  dirname,
  isAbsolute,
  join,
  relative,
  resolve as resolvePath,
  sep,
} from "node:path";
import { NonDeterminismError, WorkspaceError } from "../errors.js";
import { failRunWith } from "../lib/fail-run.js";
import { quoteGiven } from "../lib/text.js";
import type { WorkspaceObject } from "../store/workspace-records.js";
import type { StepContext, StepOptions, WorkflowContext } from "../workflow/context-types.js";
import { isCairnState, isIgnoredOrUnder, type RuleSet } from "./ignore.js";
import { restoreTo } from "./restore.js";
import { baseRules, StatCache, scanForCheckpoint } from "./scan.js";
import {
  buildTrees,
  diffSnapshots,
  fromObject,
  readTrees,
  type Snapshot,
  toObject,
} from "./tree.js";
import { WORKSPACE_DEFAULTS, type Workspace, type WorkspaceOptions } from "./types.js";

/** What a workspace needs from the execution that runs it (epoch-fenced store access). */
export interface WorkspaceHost {
  /** Parent of default workspace directories: <root>/<run id>/<name>. */
  root: string;
  missing(hashes: string[]): Promise<string[]>;
  /** Stores objects and the run's refs to them and to `refs` (fenced by the execution's
   *  epoch). Resolves with the hashes the store lacks (nothing was written then). */
  put(objects: WorkspaceObject[], refs: string[]): Promise<{ missing: string[] }>;
  get(hashes: string[]): Promise<WorkspaceObject[]>;
  log(message: string): void;
}

/** The key that marks a workspace step's recorded value (engine/workspace-views.ts reads it). */
export const WORKSPACE_MARK = "cairn.workspace";
const MARK = WORKSPACE_MARK;
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const PUT_CHUNK_BYTES = 8 * 1024 * 1024;
const GET_CHUNK = 500;
const SMALL_BYTES = 64 * 1024;
const SMALL_COUNT = 2_000;

interface OpenValue {
  [MARK]: string;
  checkpoint: string;
  files: number;
  bytes: number;
}

interface StepValue<T> {
  [MARK]: string;
  checkpoint: string;
  changes: { added: number; modified: number; deleted: number };
  /** Bytes of content this checkpoint added to the run. */
  bytes: number;
  value: T;
}

interface Known {
  snapshot: Snapshot;
  /** Every object the checkpoint holds (trees and blobs). */
  holds: Set<string>;
}

/** A one-at-a-time lock (a body, a restore). */
class Lock {
  private tail: Promise<void> = Promise.resolve();
  held = false;
  async acquire(): Promise<() => void> {
    let release!: () => void;
    const next = new Promise<void>((r) => {
      release = r;
    });
    const prev = this.tail;
    this.tail = prev.then(() => next);
    await prev;
    this.held = true;
    return () => {
      this.held = false;
      release();
    };
  }
}

export function checkWorkspaceName(name: unknown): asserts name is string {
  if (typeof name !== "string" || !NAME_RE.test(name)) {
    throw new TypeError(
      `ctx.workspace(${quoteGiven(name)}): a workspace name is 1-64 letters, digits, ".", "_" or "-", starting with a letter or digit`,
    );
  }
}

export class WorkspaceHandle implements Workspace {
  readonly dir: string;
  /** No `dir` was given: the directory is cairn's, under the workspace root. */
  private readonly managed: boolean;
  private readonly rules: RuleSet[];
  private readonly gitignore: boolean;
  private readonly limits: { maxFileBytes: number; maxCheckpointBytes: number };
  private readonly cache = new StatCache();
  private readonly lock = new Lock();
  /** The checkpoint handed over last (the state the next step starts from). */
  private current: string | undefined;
  /** What the directory holds, as far as this execution knows. */
  private disk: string | "unknown" = "unknown";
  /** Snapshots of checkpoints met in this execution (the current one and the disk's). */
  private readonly known = new Map<string, Known>();
  private pending = 0;
  /** Recently read small objects by hash. */
  private readonly small = new Map<string, Buffer>();
  private tail: Promise<void> = Promise.resolve();

  constructor(
    readonly name: string,
    private readonly ctx: WorkflowContext,
    private readonly host: WorkspaceHost | undefined,
    options: WorkspaceOptions,
    /** Whether the caller is inside a step's body (where calls do not nest). */
    private readonly inStepBody: () => boolean = () => false,
  ) {
    checkOptions(name, options);
    const dir = options.dir ?? join(host?.root ?? ".cairn/workspaces", runDirName(ctx.runId), name);
    this.dir = resolvePath(dir);
    this.managed = options.dir === undefined;
    this.rules = baseRules(options);
    this.gitignore = options.gitignore !== false;
    this.limits = {
      maxFileBytes: positive(options.maxFileBytes, "maxFileBytes", WORKSPACE_DEFAULTS.maxFileBytes),
      maxCheckpointBytes: positive(
        options.maxCheckpointBytes,
        "maxCheckpointBytes",
        WORKSPACE_DEFAULTS.maxCheckpointBytes,
      ),
    };
  }

  get checkpoint(): string {
    return this.current ?? "";
  }

  /** Opens the workspace: its base checkpoint is recorded once, replayed afterwards. */
  async open(): Promise<this> {
    const recorded = await this.ctx.step<OpenValue>(`workspace:${this.name}`, () =>
      this.locked(() => this.snapshotBase()),
    );
    this.current = this.valueOf(recorded, `workspace:${this.name}`).checkpoint;
    return this;
  }

  step<T>(name: string, fn: (s: StepContext) => Promise<T> | T, options?: StepOptions): Promise<T> {
    if (typeof fn !== "function") {
      return Promise.reject(
        new TypeError(`ws.step("${name}"): the second argument must be a function`),
      );
    }
    // One at a time, in call order. An idle workspace calls at once (no extra turn).
    const run = async (): Promise<T> => {
      const recorded = await this.ctx.step<StepValue<T>>(
        name,
        (s) => this.locked(() => this.body(name, s, fn)),
        options,
      );
      const v = this.valueOf(recorded, name) as StepValue<T>;
      this.current = v.checkpoint;
      return v.value;
    };
    // Inside a step's body, waiting for the steps before it would wait for that body (a
    // ws.step in a ws.step hung for ever): ctx.step refuses the nesting at once instead.
    if (this.inStepBody()) return run();
    const mine = this.pending === 0 ? run() : this.tail.then(run);
    this.pending++;
    const settled = mine.then(
      () => {},
      () => {},
    );
    this.tail = settled.then(() => {
      this.pending--;
    });
    return mine;
  }

  /** Whether the directory at `rel` (relative to this one's, "/"-separated, not "") is part
   *  of its state: no ancestor of it, up to this directory, is ignored by the workspace's
   *  own patterns (options and defaults: .gitignore files are content a step may change),
   *  and it is not in cairn's state (.cairn), which no pattern re-includes. */
  keeps(rel: string): boolean {
    return !isCairnState(rel) && !isIgnoredOrUnder(this.rules, rel, true);
  }

  /** The frontier check of the context: restore before another call executes? */
  get needsSync(): boolean {
    return (
      this.host !== undefined &&
      this.current !== undefined &&
      !this.lock.held &&
      this.disk !== this.current &&
      !this.ctx.signal.aborted
    );
  }

  /** Brings the directory to the current checkpoint (unless a body holds it meanwhile). */
  async sync(): Promise<void> {
    await this.locked(async () => {
      const target = this.current;
      if (target !== undefined && this.disk !== target && !this.ctx.signal.aborted) {
        await this.restore(target);
      }
    });
  }

  // ---- internals ----

  private async locked<T>(fn: () => Promise<T>): Promise<T> {
    const release = await this.lock.acquire();
    try {
      return await fn();
    } finally {
      release();
    }
  }

  private valueOf(recorded: unknown, key: string): OpenValue | StepValue<unknown> {
    const v = recorded as Partial<StepValue<unknown>> | undefined;
    if (!v || typeof v !== "object" || v[MARK] !== this.name || typeof v.checkpoint !== "string") {
      const err = new NonDeterminismError(
        `Run "${this.ctx.runId}": the journal's record of "${key}" holds no checkpoint of workspace "${this.name}", but the code now runs it as a step of that workspace. Run the code this run started on, or fork the run onto a new version.`,
      );
      // Fails the run through the engine (a workflow that catches the error must not go on),
      // and this call with it.
      failRunWith(this.ctx, err).catch(() => {});
      throw err;
    }
    return v as StepValue<unknown>;
  }

  private needHost(): WorkspaceHost {
    if (!this.host) {
      throw new WorkspaceError(
        `Workspace "${this.name}" of run "${this.ctx.runId}" cannot be used here: this execution has no workspace store (replay check)`,
      );
    }
    return this.host;
  }

  private async snapshotBase(): Promise<OpenValue> {
    const empty: Known = { snapshot: new Map(), holds: new Set() };
    if (this.managed && this.host) {
      // A directory of cairn's own starts empty in a new run: whatever is there was left by
      // an earlier run under the same id (deleted by retention, then started again), or by
      // an attempt of this opening that never got its record. Nothing is ignored here. Only
      // a run directory cairn made (it holds RUN_DIR_MARK) is cairn's to empty: one that was
      // there before (workspaceRoot set to a project of the user's, a run id they chose) is
      // taken as the opening's base, as it always was.
      await startManagedDir(this.dir);
    }
    const { checkpoint, snapshot, fresh } = await this.take(empty, "when opened");
    this.disk = checkpoint;
    return { [MARK]: this.name, checkpoint, files: countFiles(snapshot), bytes: fresh };
  }

  private async body<T>(
    name: string,
    s: StepContext,
    fn: (s: StepContext) => Promise<T> | T,
  ): Promise<StepValue<T>> {
    const from = this.current;
    if (from === undefined) throw new Error(`workspace "${this.name}" is not open`);
    // Always compared (a walk; unchanged files are not read): what the step starts from is
    // the checkpoint, not whatever code outside workspace steps left in the directory.
    const inSync = this.disk === from;
    const fixed = await this.restore(from);
    if (inSync && fixed.written + fixed.deleted > 0) {
      this.host?.log(
        `workspace "${this.name}" of run "${this.ctx.runId}": ${fixed.written + fixed.deleted} path(s) changed outside a workspace step were reverted before step "${name}"; make the code that changes the directory a workspace step`,
      );
    }
    try {
      const value = await fn(s);
      if (s.signal.aborted) throw s.signal.reason ?? new Error("the step was aborted");
      const base = await this.knownOf(from);
      const { checkpoint, snapshot, fresh } = await this.take(base, `step ${JSON.stringify(name)}`);
      this.disk = checkpoint;
      return {
        [MARK]: this.name,
        checkpoint,
        changes: diffSnapshots(base.snapshot, snapshot),
        bytes: fresh,
        value,
      };
    } catch (err) {
      this.disk = "unknown";
      await this.rollback(from);
      throw err;
    }
  }

  /** After a failed body: back to the checkpoint it started from, now (best effort: the
   *  next call restores it anyway). Never once the run has stopped: another worker may own
   *  the run, and the directory, by then. */
  private async rollback(to: string): Promise<void> {
    if (this.ctx.signal.aborted) return;
    try {
      await this.restore(to);
    } catch (err) {
      this.host?.log(
        `workspace "${this.name}" of run "${this.ctx.runId}": rolling back after a failed step failed (${(err as Error).message}); it is restored before the next call`,
      );
    }
  }

  /** Scans the directory against `base`, stores what is new, and returns the checkpoint. */
  private async take(
    base: Known,
    during: string,
  ): Promise<{ checkpoint: string; snapshot: Snapshot; fresh: number }> {
    const host = this.needHost();
    const scan = await scanForCheckpoint(this.dir, {
      rules: this.rules,
      gitignore: this.gitignore,
      cache: this.cache,
      limits: this.limits,
      known: (h) => base.holds.has(h),
      name: this.name,
      during,
    });
    const built = buildTrees(scan.snapshot);
    if (!base.holds.has(built.root)) {
      const newTrees = [...built.trees].filter(([h]) => !base.holds.has(h));
      const candidates = [...scan.fresh.keys(), ...newTrees.map(([h]) => h)];
      const absent = new Set(await host.missing(candidates));
      const objects: WorkspaceObject[] = [];
      for (const [h, content] of scan.fresh)
        if (absent.has(h)) objects.push(toObject("blob", content, h));
      for (const [h, text] of newTrees) if (absent.has(h)) objects.push(toObject("tree", text, h));
      const refs = [...built.holds].filter((h) => !base.holds.has(h));
      await this.store(objects, refs, (h) => {
        const blob = scan.fresh.get(h);
        if (blob) return toObject("blob", blob, h);
        const tree = built.trees.get(h);
        return tree ? toObject("tree", tree, h) : undefined;
      });
    }
    this.remember(built.root, { snapshot: scan.snapshot, holds: built.holds });
    return { checkpoint: built.root, snapshot: scan.snapshot, fresh: scan.freshBytes };
  }

  /** Puts objects in chunks, each with its refs; objects the store turns out to lack
   *  (deleted by retention since they were looked up) are sent after all. */
  private async store(
    objects: WorkspaceObject[],
    refs: string[],
    rebuild: (hash: string) => WorkspaceObject | undefined,
  ): Promise<void> {
    const host = this.needHost();
    const sent = new Set(objects.map((o) => o.hash));
    const rest = refs.filter((h) => !sent.has(h));
    let chunk: WorkspaceObject[] = [];
    let bytes = 0;
    const flush = async (last: boolean) => {
      let batch = chunk;
      let batchRefs = last ? rest : [];
      chunk = [];
      bytes = 0;
      for (let tries = 0; ; tries++) {
        const { missing } = await host.put(batch, batchRefs);
        if (missing.length === 0) return;
        const resend = missing.map((h) => rebuild(h));
        if (tries > 2 || resend.some((o) => o === undefined)) {
          throw new WorkspaceError(
            `Workspace "${this.name}" of run "${this.ctx.runId}": objects ${missing.slice(0, 3).join(", ")} vanished from the store while the checkpoint was written`,
          );
        }
        batch = [...batch, ...(resend as WorkspaceObject[])];
        batchRefs = [...batchRefs];
      }
    };
    for (const o of objects) {
      if (chunk.length > 0 && bytes + o.data.byteLength > PUT_CHUNK_BYTES) await flush(false);
      chunk.push(o);
      bytes += o.data.byteLength;
    }
    await flush(true);
  }

  private async restore(to: string): Promise<{ written: number; deleted: number }> {
    const host = this.needHost();
    const fromStore = !this.known.has(to);
    const target = await this.knownOf(to);
    this.disk = "unknown";
    const done = await restoreTo(this.dir, target.snapshot, {
      rules: this.rules,
      gitignore: this.gitignore,
      cache: this.cache,
      fetchBlobs: (hashes) => this.fetch(hashes),
    });
    if (fromStore) {
      // A checkpoint read from the store may be another run's (this run is a fork): hold it.
      const { missing } = await host.put([], [...target.holds]);
      if (missing.length > 0) {
        throw new WorkspaceError(
          `Workspace "${this.name}" of run "${this.ctx.runId}": checkpoint ${to} refers to objects no longer stored (${missing.slice(0, 3).join(", ")})`,
        );
      }
    }
    this.disk = to;
    return done;
  }

  private async knownOf(checkpoint: string): Promise<Known> {
    const hit = this.known.get(checkpoint);
    if (hit) return hit;
    const read = await readTrees(checkpoint, (hashes) => this.fetch(hashes));
    this.remember(checkpoint, read);
    return read;
  }

  private remember(checkpoint: string, k: Known): void {
    this.known.set(checkpoint, k);
    // Keep the current checkpoint's and the newest ones only.
    for (const key of this.known.keys()) {
      if (this.known.size <= 3) break;
      if (key !== this.current && key !== checkpoint) this.known.delete(key);
    }
  }

  private async fetch(hashes: string[]): Promise<Map<string, Buffer>> {
    const host = this.needHost();
    const out = new Map<string, Buffer>();
    const wanted: string[] = [];
    for (const h of hashes) {
      const hit = this.small.get(h);
      if (hit) out.set(h, hit);
      else wanted.push(h);
    }
    for (let i = 0; i < wanted.length; i += GET_CHUNK) {
      const part = wanted.slice(i, i + GET_CHUNK);
      for (const o of await host.get(part)) {
        const content = fromObject(o);
        out.set(o.hash, content);
        // Small objects (directory listings, .gitignore files) are asked for again and again.
        if (content.byteLength <= SMALL_BYTES) {
          if (this.small.size >= SMALL_COUNT) this.small.delete(this.small.keys().next().value!);
          this.small.set(o.hash, content);
        }
      }
      const lost = part.filter((h) => !out.has(h));
      if (lost.length > 0) {
        throw new WorkspaceError(
          `Workspace "${this.name}" of run "${this.ctx.runId}": objects ${lost.slice(0, 3).join(", ")} are not in the store (deleted with the runs that held them?)`,
        );
      }
    }
    return out;
  }
}

/** A run id as one path segment: "." and ".." (valid run ids that encodeURIComponent
 *  leaves as they are) would name the root itself or its parent. */
function runDirName(runId: string): string {
  const seg = encodeURIComponent(runId);
  return seg === "." ? "%2E" : seg === ".." ? "%2E%2E" : seg;
}

/** Written in a run's directory under the workspace root when cairn makes it: the mark
 *  that its workspaces' directories are cairn's (a workspace name cannot start with "."). */
const RUN_DIR_MARK = ".cairn-run";

/** Before a default workspace's first opening: empties its directory when the run's
 *  directory is one cairn made, and marks a run directory it makes now. */
async function startManagedDir(dir: string): Promise<void> {
  const runDir = dirname(dir);
  const mark = join(runDir, RUN_DIR_MARK);
  try {
    if ((await lstat(mark)).isFile()) await emptyManagedDir(dir);
    return;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") return;
  }
  try {
    await lstat(runDir);
    return; // there before, and not marked: not cairn's
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") return;
  }
  await mkdir(runDir, { recursive: true });
  await writeFile(
    mark,
    "This directory holds the workspaces of one cairn run; cairn empties them when a new run under the same id opens them.\n",
    { flag: "wx" },
  ).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "EEXIST") throw err;
  });
}

/** Empties a directory of cairn's own before its first opening: deepest first, a symlink
 *  removed (never followed), a name taken as bytes (one that is not UTF-8 goes too), a
 *  directory without owner write permission made writable to be emptied. Left alone when
 *  it, or the run's directory holding it, is a symlink: cairn makes neither, so someone
 *  pointed it at a directory of theirs, whose files are not cairn's to delete (the opening
 *  takes them as its base, as it did before such directories were emptied). */
async function emptyManagedDir(dir: string): Promise<void> {
  for (const p of [dirname(dir), dir]) {
    try {
      const st = await lstat(p);
      if (!st.isDirectory()) return; // a symlink, or a file (the opening then names it)
    } catch {
      return; // nothing there yet
    }
  }
  const slash = Buffer.from("/");
  const empty = async (abs: Buffer): Promise<void> => {
    for (const name of await readdir(abs, { encoding: "buffer" })) {
      const p = Buffer.concat([abs, slash, name]);
      const st = await lstat(p);
      if (st.isDirectory()) {
        if ((st.mode & 0o700) !== 0o700) await chmod(p, (st.mode & 0o777) | 0o700);
        await empty(p);
        await rmdir(p);
      } else {
        await unlink(p);
      }
    }
  };
  await empty(Buffer.from(dir));
}

/** Why workspace `b` cannot be opened next to `a` in one run, if it cannot: the same
 *  directory, or one inside the other that the outer one keeps (does not ignore). Each
 *  would restore the shared part to its own checkpoint, undoing the other's steps. */
export function workspaceOverlap(a: WorkspaceHandle, b: WorkspaceHandle): string | undefined {
  // Compared as the restore writes them: a symlinked directory (or ancestor) is followed.
  const [ra, rb] = [realDir(a.dir), realDir(b.dir)];
  if (ra === rb) return `its directory "${b.dir}" is the directory of workspace "${a.name}"`;
  const inA = below(ra, rb);
  if (inA !== undefined && a.keeps(inA)) {
    return `its directory "${b.dir}" is inside the directory of workspace "${a.name}" ("${a.dir}"), which does not ignore it (ignore: ["${inA}"] in workspace "${a.name}" leaves it to "${b.name}")`;
  }
  const inB = below(rb, ra);
  if (inB !== undefined && b.keeps(inB)) {
    return `the directory of workspace "${a.name}" ("${a.dir}") is inside its directory "${b.dir}", which does not ignore it (ignore: ["${inB}"] in workspace "${b.name}" leaves it to "${a.name}")`;
  }
  return undefined;
}

/** `inner` relative to `outer` ("/"-separated) when it is strictly inside it. */
function below(outer: string, inner: string): string | undefined {
  const rel = relative(outer, inner);
  if (rel === "" || rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel)) return undefined;
  return rel.split(sep).join("/");
}

/** An absolute directory with the symlinks of its longest existing ancestor resolved. */
function realDir(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    const parent = dirname(dir);
    return parent === dir ? dir : join(realDir(parent), basename(dir));
  }
}

function countFiles(s: Snapshot): number {
  let n = 0;
  for (const e of s.values()) if (e.type !== "dir") n++;
  return n;
}

/** Refuses options of the wrong type, naming the option: `ignore: "*.log"` would be spread
 *  into one pattern per character ("*" ignores everything), and an empty `dir` would be the
 *  process's working directory. */
function checkOptions(name: string, o: WorkspaceOptions): void {
  const refuse = (what: string, got: unknown) =>
    new TypeError(
      `ctx.workspace(${JSON.stringify(name)}): ${what} (got ${typeof got === "string" ? JSON.stringify(got.slice(0, 100)) : String(got).slice(0, 100)})`,
    );
  if (o === null || typeof o !== "object") throw refuse("options must be an object", o);
  if (o.dir !== undefined && (typeof o.dir !== "string" || o.dir === "")) {
    throw refuse("dir must be a non-empty path", o.dir);
  }
  if (o.ignore !== undefined) {
    if (!Array.isArray(o.ignore)) {
      throw refuse('ignore must be an array of patterns, e.g. ["dist", "*.log"]', o.ignore);
    }
    const bad = o.ignore.find((p) => typeof p !== "string");
    if (bad !== undefined) throw refuse("ignore must hold only strings", bad);
  }
  for (const flag of ["defaultIgnore", "gitignore"] as const) {
    if (o[flag] !== undefined && typeof o[flag] !== "boolean") {
      throw refuse(`${flag} must be true or false`, o[flag]);
    }
  }
}

function positive(v: number | undefined, what: string, dflt: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
    throw new TypeError(
      `ctx.workspace(): ${what} must be a positive number of bytes (got ${String(v)})`,
    );
  }
  return v;
}
