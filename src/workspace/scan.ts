// Reading a workspace directory: the walk (what is there, minus ignored paths, never
// following a symlink), and the checkpoint scan (the walk plus each file's content hash).
//
// Hashing every file on every step would make a 2,000-file repository cost its whole size
// per step, so a stat cache remembers each file's (size, mtime, ctime, inode, hash) from
// the last time it was read. A file whose stat is unchanged is taken as unchanged, except a
// "racy" one: changed so shortly before it was cached that a later write within the same
// timestamp tick would be invisible (git's racy-clean problem); those are read again.

import { lstatSync, readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { WorkspaceError } from "../errors.js";
import {
  DEFAULT_IGNORE,
  FINAL_DEFAULT_IGNORE,
  isCairnState,
  isIgnored,
  parseIgnore,
  type RuleSet,
} from "./ignore.js";
import { type Entry, hashObject, type Snapshot } from "./tree.js";

export interface DiskEntry {
  type: "file" | "symlink" | "dir" | "other";
  /** Permission bits (mode & 0o777). */
  mode: number;
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  target?: string;
}

export interface IgnoreOptions {
  /** Patterns (.gitignore syntax, relative to the workspace root) besides the defaults. */
  ignore?: readonly string[];
  /** Ignore node_modules and .git (default true). */
  defaultIgnore?: boolean;
  /** Honour .gitignore files in the workspace (default true). */
  gitignore?: boolean;
}

/** The workspace's own rule sets: defaults and option patterns, below every .gitignore, and
 *  .git (a default) above them all (cairn's state is left out apart: isCairnState). */
export function baseRules(o: IgnoreOptions): RuleSet[] {
  const defaults = o.defaultIgnore === false ? [] : DEFAULT_IGNORE;
  const lines = [...defaults, ...(o.ignore ?? [])];
  const sets = [parseIgnore(lines.join("\n"))];
  if (o.defaultIgnore === false) return sets;
  return [...sets, { ...parseIgnore(FINAL_DEFAULT_IGNORE.join("\n")), final: true }];
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function kindOf(st: { isFile(): boolean; isSymbolicLink(): boolean; isDirectory(): boolean }) {
  if (st.isFile()) return "file" as const;
  if (st.isSymbolicLink()) return "symlink" as const;
  if (st.isDirectory()) return "dir" as const;
  return "other" as const;
}

/**
 * Everything under `root` that is not ignored, by relative path. `gitignoreIn(dir)` gives
 * the .gitignore text that applies in directory `dir` (undefined: none); with
 * `gitignore: false` it is never asked. A missing root is an empty workspace.
 *
 * Synchronous system calls: a stat through the thread pool costs ten times a direct one,
 * and a walk of 2,000 entries is a few milliseconds when direct.
 */
export function walk(
  root: string,
  rules: RuleSet[],
  gitignoreIn: ((dir: string) => string | undefined) | undefined,
): Map<string, DiskEntry> {
  const out = new Map<string, DiskEntry>();
  const visit = (dir: string, sets: RuleSet[]): void => {
    const abs = dir === "" ? root : join(root, dir);
    let names: string[];
    try {
      names = readdirSync(abs);
    } catch (err) {
      if (dir !== "") throw err;
      const bad = rootProblem(root);
      if (bad) throw bad;
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    let here = sets;
    if (gitignoreIn) {
      const text = gitignoreIn(dir);
      if (text !== undefined) here = [...sets, parseIgnore(text, dir)];
    }
    // A name that is not UTF-8 reads back with U+FFFD in it: only then look at its bytes.
    if (names.some((n) => n.includes("\uFFFD"))) names = utf8Names(abs, dir, here);
    const subdirs: string[] = [];
    for (const name of names) {
      const path = dir === "" ? name : `${dir}/${name}`;
      if (isCairnState(name)) continue;
      const st = lstatSync(join(root, path));
      const type = kindOf(st);
      // A .gitignore file whose rules this walk applies is always kept, even when a pattern
      // ignores it ("*" in a cache directory): a restore judges what is ignored by the
      // .gitignore files of the checkpoint alone, so it must hold every one the scan read.
      const rulesFile = gitignoreIn !== undefined && name === ".gitignore" && type === "file";
      if (!rulesFile && isIgnored(here, path, type === "dir")) continue;
      const e: DiskEntry = {
        type,
        mode: st.mode & 0o777,
        size: st.size,
        mtimeMs: st.mtimeMs,
        ctimeMs: st.ctimeMs,
        ino: st.ino,
      };
      if (type === "symlink") e.target = readlinkSync(join(root, path));
      out.set(path, e);
      if (type === "dir") subdirs.push(path);
    }
    for (const d of subdirs) visit(d, here);
  };
  /** The names of a directory holding one that is not UTF-8: such a name is refused unless
   *  it is ignored (judged by the name as read, U+FFFD in place of the bad bytes, and by
   *  its type on disk, looked up by its bytes); an ignored one is left out. */
  const utf8Names = (abs: string, dir: string, sets: RuleSet[]): string[] => {
    const out: string[] = [];
    for (const raw of readdirSync(abs, { encoding: "buffer" })) {
      try {
        out.push(utf8.decode(raw));
      } catch {
        const name = raw.toString("utf8");
        const path = dir === "" ? name : `${dir}/${name}`;
        const isDir = lstatSync(Buffer.concat([Buffer.from(`${abs}/`), raw])).isDirectory();
        if (isIgnored(sets, path, isDir)) continue;
        throw new WorkspaceError(
          `Workspace "${root}": the name ${JSON.stringify(raw.toString("latin1"))} in "${dir || "."}" is not UTF-8; a workspace keeps only UTF-8 names (rename it, or ignore it)`,
        );
      }
    }
    return out;
  };
  visit("", rules);
  return out;
}

/** Why `root` cannot be a workspace directory (a file, a dangling symlink or a symlink loop,
 *  a path through a file), as a WorkspaceError naming it; undefined when it is a directory
 *  or does not exist yet (a symlink to a directory is followed: only the root's is). */
export function rootProblem(root: string): WorkspaceError | undefined {
  const refuse = (what: string) =>
    new WorkspaceError(
      `Workspace directory "${root}" ${what}; a workspace needs a directory: give ctx.workspace another dir, or move what is there away`,
    );
  try {
    if (statSync(root).isDirectory()) return undefined;
    return refuse("is not a directory (a file or a device)");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ELOOP") return refuse("is a symlink loop");
    if (code === "ENOTDIR") return refuse("is below a file, not a directory");
    if (code !== "ENOENT") return undefined;
    try {
      if (lstatSync(root).isSymbolicLink()) {
        return refuse(`is a symlink to "${readlinkSync(root)}", which does not exist`);
      }
    } catch {
      // Nothing there: a new workspace.
    }
    return undefined;
  }
}

/** The .gitignore files of a directory on disk: regular files only, as a restore reads
 *  them from the checkpoint (a symlink is never followed; git does not follow one either). */
export function diskGitignore(root: string): (dir: string) => string | undefined {
  return (dir) => {
    const path = join(root, dir, ".gitignore");
    try {
      if (!lstatSync(path).isFile()) return undefined;
      return readFileSync(path, "utf8");
    } catch {
      return undefined;
    }
  };
}

interface Cached {
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  hash: string;
  /** Date.now() before the stat this entry came from. */
  seenAt: number;
}

/** A file changed this close to being cached may change again unseen (same timestamps). */
const RACY_MS = 50;

/** Per workspace and execution: what each file's content hash was when last read. */
export class StatCache {
  private readonly entries = new Map<string, Cached>();

  hashOf(path: string, e: DiskEntry): string | undefined {
    const c = this.entries.get(path);
    if (!c) return undefined;
    if (c.size !== e.size || c.mtimeMs !== e.mtimeMs || c.ctimeMs !== e.ctimeMs || c.ino !== e.ino)
      return undefined;
    if (Math.max(e.mtimeMs, e.ctimeMs) >= c.seenAt - RACY_MS) return undefined;
    return c.hash;
  }

  remember(path: string, e: DiskEntry, hash: string, seenAt: number): void {
    this.entries.set(path, {
      size: e.size,
      mtimeMs: e.mtimeMs,
      ctimeMs: e.ctimeMs,
      ino: e.ino,
      hash,
      seenAt,
    });
  }

  forget(path: string): void {
    this.entries.delete(path);
  }
}

export interface ScanLimits {
  maxFileBytes: number;
  /** Most bytes of content not in `known` one scan may find. */
  maxCheckpointBytes: number;
}

export interface ScanResult {
  snapshot: Snapshot;
  /** Content read by this scan that `known` did not hold, by hash (to be stored). */
  fresh: Map<string, Buffer>;
  freshBytes: number;
}

/** The checkpoint scan: every entry with its content hash, and the new content. */
export async function scanForCheckpoint(
  root: string,
  o: {
    rules: RuleSet[];
    gitignore: boolean;
    cache: StatCache;
    limits: ScanLimits;
    /** Content this workspace's current checkpoint already holds. */
    known: (hash: string) => boolean;
    name: string;
    /** What the scan checkpoints, for errors: 'step "edit"', or "when opened". */
    during: string;
  },
): Promise<ScanResult> {
  const where = `Workspace "${o.name}", ${o.during}`;
  const seenAt = Date.now();
  const disk = walk(root, o.rules, o.gitignore ? diskGitignore(root) : undefined);
  const snapshot: Snapshot = new Map();
  const fresh = new Map<string, Buffer>();
  let freshBytes = 0;
  const freshPaths: Array<[string, number]> = [];
  const files: Array<[string, DiskEntry]> = [];
  for (const [path, e] of disk) {
    if (e.type === "other") {
      throw new WorkspaceError(
        `${where}: "${path}" is neither a file, a directory nor a symlink (a socket, FIFO or device); a workspace cannot keep it: ignore it or remove it`,
      );
    }
    if (e.type === "symlink") snapshot.set(path, { type: "symlink", target: e.target ?? "" });
    else if (e.type === "dir") snapshot.set(path, { type: "dir", mode: e.mode });
    else {
      if (e.size > o.limits.maxFileBytes) {
        throw new WorkspaceError(
          `${where}: "${path}" is ${e.size} bytes, over the limit of ${o.limits.maxFileBytes} bytes per file (maxFileBytes); ignore it or raise the limit`,
        );
      }
      files.push([path, e]);
    }
  }
  // Read in small parallel batches: enough to overlap I/O, few enough open files.
  for (let i = 0; i < files.length; i += 32) {
    await Promise.all(
      files.slice(i, i + 32).map(async ([path, e]) => {
        // Unchanged since last read, and already held by the current checkpoint: no read.
        let hash = o.cache.hashOf(path, e);
        if (hash !== undefined && !o.known(hash)) hash = undefined;
        let size = e.size;
        if (hash === undefined) {
          const content = await readFile(join(root, path));
          if (content.byteLength > o.limits.maxFileBytes) {
            throw new WorkspaceError(
              `${where}: "${path}" grew past the limit of ${o.limits.maxFileBytes} bytes per file while it was read`,
            );
          }
          size = content.byteLength;
          hash = hashObject("blob", content);
          o.cache.remember(path, { ...e, size: content.byteLength }, hash, seenAt);
          if (!o.known(hash) && !fresh.has(hash)) {
            fresh.set(hash, content);
            freshBytes += content.byteLength;
            freshPaths.push([path, content.byteLength]);
            if (freshBytes > o.limits.maxCheckpointBytes) {
              // Thrown as soon as the limit is passed (nothing more is read): "at least".
              const largest = freshPaths
                .sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1))
                .slice(0, 3)
                .map(([p, n]) => `${JSON.stringify(p)} (${n} bytes)`)
                .join(", ");
              throw new WorkspaceError(
                `${where}: at least ${freshBytes} bytes of new content, over the limit of ${o.limits.maxCheckpointBytes} bytes per checkpoint (maxCheckpointBytes); largest new files: ${largest}; ignore build outputs and large files, or raise the limit`,
              );
            }
          }
        }
        const entry: Entry = { type: "file", mode: e.mode, hash, size };
        snapshot.set(path, entry);
      }),
    );
  }
  return { snapshot, fresh, freshBytes };
}
