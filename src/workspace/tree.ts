// A workspace's state as content-addressed objects, git-style: a file's content is a blob;
// a directory is a tree, the sorted list of its entries (file: mode, blob, size; symlink:
// its target; directory: mode, tree); a checkpoint is the hash of the root tree. Equal
// content has one address wherever it appears, so a file stored once costs nothing for
// every later step, run and workspace that holds it, and an unchanged directory's tree is
// the same object in every checkpoint.
//
// Stored form: one byte (0 raw, 1 deflate-raw) then the bytes. Every object read back is
// hashed again: a store that returns other bytes than were put is caught, not restored.

import { createHash } from "node:crypto";
import { deflateRawSync, inflateRawSync } from "node:zlib";
import { encryptedBytesKeyId } from "../codec/encryption.js";
import { PayloadKeyError, WorkspaceError } from "../errors.js";
import type { WorkspaceObject } from "../store/workspace-records.js";

export type Entry =
  | { type: "file"; mode: number; hash: string; size: number }
  | { type: "symlink"; target: string }
  | { type: "dir"; mode: number };

/** Every entry of a workspace by its path relative to the root ("a/b.txt"; "/"-separated;
 *  directories included, the root itself not). */
export type Snapshot = Map<string, Entry>;

type TreeEntry =
  | [name: string, type: "f", mode: number, hash: string, size: number]
  | [name: string, type: "l", target: string]
  | [name: string, type: "d", mode: number, hash: string];

export function hashObject(kind: "blob" | "tree", content: Uint8Array): string {
  return createHash("sha256")
    .update(`${kind} ${content.byteLength}\0`)
    .update(content)
    .digest("hex");
}

/** The object to store for `content` (compressed when that saves at least an eighth). */
export function toObject(
  kind: "blob" | "tree",
  content: Uint8Array,
  hash?: string,
): WorkspaceObject {
  let data: Uint8Array;
  const packed = content.byteLength > 64 ? deflateRawSync(content) : undefined;
  if (packed && packed.byteLength <= content.byteLength - (content.byteLength >> 3)) {
    data = new Uint8Array(packed.byteLength + 1);
    data[0] = 1;
    data.set(packed, 1);
  } else {
    data = new Uint8Array(content.byteLength + 1);
    data[0] = 0;
    data.set(content, 1);
  }
  return { hash: hash ?? hashObject(kind, content), kind, size: content.byteLength, data };
}

/** The content of a stored object, checked against its address. */
export function fromObject(o: WorkspaceObject): Buffer {
  // Sealed by an encrypted store, read through one given no keys: refused naming the key
  // (the run is paused), not taken for a damaged object (which fails the run).
  const keyId = encryptedBytesKeyId(o.data, `Workspace object ${o.hash}`);
  if (keyId !== undefined) {
    throw new PayloadKeyError(
      `Workspace object ${o.hash} is encrypted with key "${keyId}", and this store was given no keys; wrap it in encryptedStore(store, { keys }) with key "${keyId}" to read it`,
      { keyId },
    );
  }
  const body = Buffer.from(o.data.buffer, o.data.byteOffset + 1, o.data.byteLength - 1);
  let content: Buffer;
  try {
    content = o.data[0] === 1 ? inflateRawSync(body) : o.data[0] === 0 ? body : Buffer.alloc(0);
  } catch (err) {
    throw new WorkspaceError(`Workspace object ${o.hash} cannot be decompressed`, { cause: err });
  }
  if (hashObject(o.kind, content) !== o.hash) {
    throw new WorkspaceError(
      `Workspace object ${o.hash} read back from the store does not match its address: the stored copy is damaged`,
    );
  }
  return content;
}

function treeText(entries: TreeEntry[]): Buffer {
  entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return Buffer.from(JSON.stringify(entries), "utf8");
}

function parentOf(path: string): string {
  const i = path.lastIndexOf("/");
  return i < 0 ? "" : path.slice(0, i);
}

function nameOf(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

export interface BuiltTrees {
  root: string;
  /** Tree objects by hash (content = the tree's text). */
  trees: Map<string, Buffer>;
  /** Every object hash the checkpoint holds: its trees and the blobs they list. */
  holds: Set<string>;
}

/** The trees of a snapshot, built bottom-up. */
export function buildTrees(snapshot: Snapshot): BuiltTrees {
  const children = new Map<string, TreeEntry[]>([["", []]]);
  const dirs = [...snapshot.entries()]
    .filter(([, e]) => e.type === "dir")
    .map(([p]) => p)
    .sort((a, b) => b.split("/").length - a.split("/").length);
  for (const d of dirs) children.set(d, []);
  const holds = new Set<string>();
  for (const [path, e] of snapshot) {
    const list = children.get(parentOf(path));
    if (!list) throw new Error(`workspace snapshot: "${path}" has no parent directory entry`);
    if (e.type === "file") {
      list.push([nameOf(path), "f", e.mode, e.hash, e.size]);
      holds.add(e.hash);
    } else if (e.type === "symlink") {
      list.push([nameOf(path), "l", e.target]);
    }
  }
  const trees = new Map<string, Buffer>();
  const treeOf = new Map<string, string>();
  // Deepest first, so a directory's own tree exists before its parent lists it.
  for (const d of [...dirs, ""]) {
    const text = treeText(children.get(d)!);
    const hash = hashObject("tree", text);
    trees.set(hash, text);
    treeOf.set(d, hash);
    holds.add(hash);
    if (d !== "") {
      const e = snapshot.get(d) as { type: "dir"; mode: number };
      children.get(parentOf(d))!.push([nameOf(d), "d", e.mode, hash]);
    }
  }
  return { root: treeOf.get("")!, trees, holds };
}

/**
 * The snapshot a checkpoint holds: reads its trees (level by level, each level in one
 * call of `load`) and flattens them. Also returns every object hash it holds.
 */
export async function readTrees(
  root: string,
  load: (hashes: string[]) => Promise<Map<string, Buffer>>,
): Promise<{ snapshot: Snapshot; holds: Set<string> }> {
  const snapshot: Snapshot = new Map();
  const holds = new Set<string>([root]);
  let level: Array<{ hash: string; path: string }> = [{ hash: root, path: "" }];
  while (level.length > 0) {
    const texts = await load([...new Set(level.map((l) => l.hash))]);
    const next: typeof level = [];
    for (const { hash, path } of level) {
      const text = texts.get(hash);
      if (!text) {
        throw new WorkspaceError(
          `Workspace checkpoint ${root}: its directory object ${hash} is not in the store (deleted with the runs that held it?)`,
        );
      }
      let entries: TreeEntry[];
      try {
        entries = JSON.parse(text.toString("utf8")) as TreeEntry[];
      } catch (err) {
        throw new WorkspaceError(`Workspace object ${hash} is not a directory listing`, {
          cause: err,
        });
      }
      const bad = badTreeEntry(entries);
      if (bad) {
        throw new WorkspaceError(
          `Workspace object ${hash} is not a directory listing cairn writes (${bad}): the stored checkpoint ${root} is damaged or forged, and is not restored`,
        );
      }
      for (const e of entries) {
        const p = path === "" ? e[0] : `${path}/${e[0]}`;
        if (e[1] === "f") {
          snapshot.set(p, { type: "file", mode: e[2], hash: e[3], size: e[4] });
          holds.add(e[3]);
        } else if (e[1] === "l") {
          snapshot.set(p, { type: "symlink", target: e[2] });
        } else {
          snapshot.set(p, { type: "dir", mode: e[2] });
          holds.add(e[3]);
          next.push({ hash: e[3], path: p });
        }
      }
    }
    level = next;
  }
  return { snapshot, holds };
}

/** Why a parsed tree is not one buildTrees makes, if it is not. Its hash only proves it is
 *  what was stored: a restore joins each name to a path and sets each mode, so a name that
 *  is not one path segment ("..", "a/b") would write outside the workspace, and a mode
 *  beyond the permission bits would set setuid. */
function badTreeEntry(entries: unknown): string | undefined {
  if (!Array.isArray(entries)) return "not a list";
  const seen = new Set<string>();
  for (const e of entries as unknown[]) {
    if (!Array.isArray(e) || typeof e[0] !== "string") return "an entry without a name";
    const [name, type] = e as [string, unknown];
    if (name === "" || name === "." || name === ".." || /[/\0]/.test(name)) {
      return `the entry name ${JSON.stringify(name)}`;
    }
    if (seen.has(name)) return `the name ${JSON.stringify(name)} twice`;
    seen.add(name);
    const modeOk = (m: unknown) =>
      Number.isInteger(m) && (m as number) >= 0 && (m as number) <= 0o777;
    const ok =
      type === "l"
        ? typeof e[2] === "string"
        : (type === "f" || type === "d") &&
          modeOk(e[2]) &&
          typeof e[3] === "string" &&
          (type === "d" || (Number.isSafeInteger(e[4]) && (e[4] as number) >= 0));
    if (!ok) return `the entry ${JSON.stringify(name)} of type ${JSON.stringify(type)}`;
  }
  return undefined;
}

/** A file or symlink that differs between two snapshots. */
export interface SnapshotChange {
  path: string;
  change: "added" | "modified" | "deleted";
  before?: Entry;
  after?: Entry;
}

/**
 * What changed from `before` to `after`: the added and modified paths in `after`'s order,
 * then the deleted ones in `before`'s. A directory is not a change of its own; a file it
 * replaced is deleted, a file that replaced it added. The one comparison behind a step's
 * counts (diffSnapshots) and the inspection's list (engine.diffCheckpoints).
 */
export function snapshotChanges(before: Snapshot, after: Snapshot): SnapshotChange[] {
  const changes: SnapshotChange[] = [];
  for (const [path, now] of after) {
    if (now.type === "dir") continue;
    const old = before.get(path);
    if (!old || old.type === "dir") changes.push({ path, change: "added", after: now });
    else if (!sameEntry(old, now)) {
      changes.push({ path, change: "modified", before: old, after: now });
    }
  }
  for (const [path, old] of before) {
    if (old.type === "dir") continue;
    const now = after.get(path);
    if (!now || now.type === "dir") changes.push({ path, change: "deleted", before: old });
  }
  return changes;
}

/** How many files changed from `before` to `after` (directories not counted). */
export function diffSnapshots(
  before: Snapshot,
  after: Snapshot,
): { added: number; modified: number; deleted: number } {
  const counts = { added: 0, modified: 0, deleted: 0 };
  for (const c of snapshotChanges(before, after)) counts[c.change]++;
  return counts;
}

export function sameEntry(a: Entry, b: Entry): boolean {
  if (a.type !== b.type) return false;
  if (a.type === "file" && b.type === "file") return a.hash === b.hash && a.mode === b.mode;
  if (a.type === "symlink" && b.type === "symlink") return a.target === b.target;
  return a.type === "dir" && b.type === "dir" && a.mode === b.mode;
}
