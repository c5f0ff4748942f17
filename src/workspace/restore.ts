// Bringing a directory to a checkpoint: whatever is there (nothing, an older state, a step's
// half-done edit), afterwards every path the checkpoint holds has its content, mode or
// symlink target, and every other path that is not ignored is gone. Ignored paths
// (node_modules, build output) are left alone, judged by the checkpoint's own .gitignore
// files. Idempotent: a restore cut short by a crash is simply done again.
//
// Never through a symlink: entries are removed with unlink/rmdir (which do not follow
// links), a path whose type differs is removed before anything is created there, and files
// are written to a temporary name in their directory, then renamed over the old entry
// (so a hard link elsewhere keeps its content).

import { randomBytes } from "node:crypto";
import { chmodSync, lstatSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { chmod, mkdir, readFile, rm, rmdir, symlink, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { isCairnState, isIgnoredOrUnder, type RuleSet } from "./ignore.js";
import { type DiskEntry, rootProblem, type StatCache, walk } from "./scan.js";
import { type Entry, hashObject, type Snapshot } from "./tree.js";

export interface RestoreOptions {
  rules: RuleSet[];
  gitignore: boolean;
  cache: StatCache;
  /** Contents of blobs by hash (each call asks for at most about 16 MiB). */
  fetchBlobs(hashes: string[]): Promise<Map<string, Buffer>>;
}

const depth = (p: string) => p.split("/").length;
const BATCH_BYTES = 16 * 1024 * 1024;

function differs(disk: DiskEntry, want: Entry): boolean {
  if (want.type === "dir") return disk.type !== "dir";
  if (want.type === "symlink") return disk.type !== "symlink" || disk.target !== want.target;
  return disk.type !== "file";
}

export async function restoreTo(
  root: string,
  checkpoint: Snapshot,
  o: RestoreOptions,
): Promise<{ written: number; deleted: number }> {
  const target = withoutUnwalked(checkpoint, o.rules);
  const bad = rootProblem(root);
  if (bad) throw bad;
  await mkdir(root, { recursive: true });
  const gitignores = o.gitignore ? await checkpointGitignores(target, o.fetchBlobs) : undefined;
  const disk = walk(
    root,
    o.rules,
    gitignores && ((dir) => gitignores.get(dir === "" ? ".gitignore" : `${dir}/.gitignore`)),
  );
  const site = new Site(root, disk, o.cache);
  const deleted = await removeStrays(site, target);
  // Shallowest first: a directory exists before what it holds.
  const entries = [...target].sort((a, b) => depth(a[0]) - depth(b[0]));
  await makeDirs(site, entries);
  const { toWrite, symlinks } = await filesAndSymlinks(site, entries);
  const files = await writeFiles(site, toWrite, o.fetchBlobs);
  await setDirModes(site, entries);
  return { written: symlinks + files, deleted };
}

type FileEntry = Extract<Entry, { type: "file" }>;

/** The checkpoint without what the walk never enters: cairn's own state (.cairn) and what
 *  a final rule set ignores (.git). A checkpoint taken before they were always ignored
 *  (.cairn with defaultIgnore: false, .git re-included by a whitelist's "!*\/") may hold
 *  them: restored, the live store or repository (not there to the walk) was replaced with
 *  the recorded copy. */
function withoutUnwalked(target: Snapshot, rules: RuleSet[]): Snapshot {
  const finals = rules.filter((s) => s.final);
  const unwalked = (p: string, e: Entry) =>
    isCairnState(p) || (finals.length > 0 && isIgnoredOrUnder(finals, p, e.type === "dir"));
  if (![...target].some(([p, e]) => unwalked(p, e))) return target;
  return new Map([...target].filter(([p, e]) => !unwalked(p, e)));
}

/** The text of each .gitignore file the checkpoint holds, by path: they decide what is
 *  ignored (they are what the checkpoint was taken with). */
async function checkpointGitignores(
  target: Snapshot,
  fetchBlobs: RestoreOptions["fetchBlobs"],
): Promise<Map<string, string>> {
  const wanted = [...target]
    .filter(([p, e]) => e.type === "file" && (p === ".gitignore" || p.endsWith("/.gitignore")))
    .map(([p, e]) => [p, (e as FileEntry).hash] as const);
  const texts = await fetchBlobs([...new Set(wanted.map(([, h]) => h))]);
  return new Map(wanted.map(([p, h]) => [p, texts.get(h)?.toString("utf8") ?? ""]));
}

/** The directory being restored: what the walk found there (kept up to date as entries
 *  are removed), and which directories were made owner-writable to change their content. */
class Site {
  readonly writable = new Set<string>();

  constructor(
    readonly root: string,
    readonly disk: Map<string, DiskEntry>,
    readonly cache: StatCache,
  ) {}

  abs(p: string): string {
    return join(this.root, p);
  }

  /** Makes the directory that holds `p` owner-writable (step 4 sets its mode after). */
  async openParentOf(p: string): Promise<void> {
    const i = p.lastIndexOf("/");
    const dir = i < 0 ? "" : p.slice(0, i);
    if (dir === "" || this.writable.has(dir)) return;
    this.writable.add(dir);
    const e = this.disk.get(dir);
    if (e?.type === "dir" && (e.mode & 0o700) !== 0o700) await chmod(this.abs(dir), e.mode | 0o700);
  }
}

/** 1. Removes what the checkpoint does not hold, or holds as something else; deepest first. */
async function removeStrays(site: Site, target: Snapshot): Promise<number> {
  const doomed = [...site.disk]
    .filter(([p, e]) => {
      const want = target.get(p);
      return !want || differs(e, want);
    })
    .sort((a, b) => depth(b[0]) - depth(a[0]));
  for (const [p, e] of doomed) {
    await site.openParentOf(p);
    const abs = site.abs(p);
    if (e.type === "dir") {
      if (target.has(p)) {
        await chmod(abs, 0o700).catch(() => {});
        await rm(abs, { recursive: true, force: true });
      } else {
        // Ignored content keeps a directory that is otherwise gone.
        await rmdir(abs).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== "ENOTEMPTY" && err.code !== "EEXIST") throw err;
        });
      }
    } else {
      await unlink(abs);
    }
    site.cache.forget(p);
    site.disk.delete(p);
  }
  return doomed.length;
}

/** 2. Directories, shallowest first (owner-writable until step 4 sets their modes). */
async function makeDirs(site: Site, entries: Array<[string, Entry]>): Promise<void> {
  for (const [p, e] of entries) {
    if (e.type !== "dir" || site.disk.has(p)) continue;
    await site.openParentOf(p);
    await inTheWay(site.abs(p), () => mkdir(site.abs(p), { mode: 0o700 }), true);
    site.writable.add(p);
  }
}

/** 3a. Creates missing symlinks, and lists the files to write: a file whose content
 *  already matches only gets its mode (unless it is hard-linked: then it is written). */
async function filesAndSymlinks(
  site: Site,
  entries: Array<[string, Entry]>,
): Promise<{ toWrite: Array<[string, FileEntry]>; symlinks: number }> {
  const toWrite: Array<[string, FileEntry]> = [];
  let symlinks = 0;
  for (const [p, e] of entries) {
    if (e.type === "symlink") {
      if (site.disk.has(p)) continue;
      await site.openParentOf(p);
      await inTheWay(site.abs(p), () => symlink(e.target, site.abs(p)));
      symlinks++;
    } else if (e.type === "file") {
      const have = site.disk.get(p);
      if (
        have &&
        have.size === e.size &&
        (await sameContent(site.root, p, have, e.hash, site.cache))
      ) {
        if (have.mode === e.mode) continue;
        // A mode belongs to the inode: through a hard link, chmod would change another path
        // too (in the workspace or outside it). Such a file is written anew instead.
        if (lstatSync(site.abs(p)).nlink <= 1) {
          await chmod(site.abs(p), e.mode);
          continue;
        }
      }
      toWrite.push([p, e]);
    }
  }
  return { toWrite, symlinks };
}

/** 3b. Writes the files, fetching their blobs about BATCH_BYTES at a time. */
async function writeFiles(
  site: Site,
  toWrite: Array<[string, FileEntry]>,
  fetchBlobs: RestoreOptions["fetchBlobs"],
): Promise<number> {
  for (const batch of batches(toWrite)) {
    const blobs = await fetchBlobs([...new Set(batch.map(([, e]) => e.hash))]);
    for (const [p, e] of batch) {
      const content = blobs.get(e.hash);
      if (!content) {
        throw new Error(`restore: blob ${e.hash} of "${p}" was not returned by the store`);
      }
      await site.openParentOf(p);
      writeFile(site, p, e, content);
    }
  }
  return toWrite.length;
}

/** Consecutive runs of files of at most BATCH_BYTES together (a larger file alone). */
function* batches(files: Array<[string, FileEntry]>): Generator<Array<[string, FileEntry]>> {
  for (let i = 0; i < files.length; ) {
    let bytes = 0;
    const batch: Array<[string, FileEntry]> = [];
    while (i < files.length && (batch.length === 0 || bytes + files[i]![1].size <= BATCH_BYTES)) {
      bytes += files[i]![1].size;
      batch.push(files[i++]!);
    }
    yield batch;
  }
}

/** Writes one file and remembers its stat and hash, so the next scan need not read it. */
function writeFile(site: Site, p: string, e: FileEntry, content: Buffer): void {
  const abs = site.abs(p);
  // Direct system calls, as in the walk. A new path is created exclusively (which also
  // refuses to follow a symlink put there meanwhile); an existing file is replaced.
  if (!site.disk.has(p)) {
    try {
      writeFileSync(abs, content, { mode: e.mode, flag: "wx" });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      rmSync(abs, { recursive: true, force: true }); // an ignored entry in the way (inTheWay)
      writeFileSync(abs, content, { mode: e.mode, flag: "wx" });
    }
    chmodSync(abs, e.mode);
  } else {
    const tmp = join(dirname(abs), `.cairn-restore-${randomBytes(6).toString("hex")}`);
    writeFileSync(tmp, content, { mode: e.mode, flag: "wx" });
    chmodSync(tmp, e.mode);
    renameSync(tmp, abs);
  }
  const seenAt = Date.now();
  const st = lstatSync(abs);
  site.cache.remember(
    p,
    {
      type: "file",
      mode: st.mode & 0o777,
      size: st.size,
      mtimeMs: st.mtimeMs,
      ctimeMs: st.ctimeMs,
      ino: st.ino,
    },
    e.hash,
    seenAt,
  );
}

/** Creates an entry the walk did not see. Something may be there all the same: an entry
 *  ignored only as the type it has on disk ("build/" ignores a directory, not the file the
 *  checkpoint holds at that path). The checkpoint's entry wins: what is in the way goes. */
async function inTheWay(abs: string, create: () => Promise<unknown>, dir = false): Promise<void> {
  try {
    await create();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    if (dir && lstatSync(abs).isDirectory()) return; // a directory is what is wanted
    await rm(abs, { recursive: true, force: true });
    await create();
  }
}

/** 4. Directory modes, deepest first (a read-only directory is closed after its contents). */
async function setDirModes(site: Site, entries: Array<[string, Entry]>): Promise<void> {
  for (const [p, e] of [...entries].reverse()) {
    if (e.type !== "dir") continue;
    const have = site.disk.get(p);
    if (!have || have.mode !== e.mode || site.writable.has(p)) await chmod(site.abs(p), e.mode);
  }
}

async function sameContent(
  root: string,
  path: string,
  have: DiskEntry,
  hash: string,
  cache: StatCache,
): Promise<boolean> {
  const cached = cache.hashOf(path, have);
  if (cached !== undefined) return cached === hash;
  const seenAt = Date.now();
  const content = await readFile(join(root, path));
  const actual = hashObject("blob", content);
  cache.remember(path, { ...have, size: content.byteLength }, actual, seenAt);
  return actual === hash;
}
