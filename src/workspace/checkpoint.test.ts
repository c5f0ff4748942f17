// Checkpoint and restore on real directories, with an in-memory object store: what a
// restore produces equals, byte for byte, what was checkpointed (contents, modes, symlinks,
// empty directories, deletions), whatever the directory held before, without ever writing
// through a symlink, and leaving ignored paths alone.

import { execFileSync } from "node:child_process";
import {
  chmodSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { treeOf } from "../../test/helpers/tree.js";
import { WorkspaceError } from "../errors.js";
import type { WorkspaceObject } from "../store/workspace-records.js";
import { restoreTo } from "./restore.js";
import { baseRules, StatCache, scanForCheckpoint } from "./scan.js";
import {
  buildTrees,
  diffSnapshots,
  type Entry,
  fromObject,
  readTrees,
  type Snapshot,
  snapshotChanges,
  toObject,
} from "./tree.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) {
    execFileSync("chmod", ["-R", "u+rwx", d]);
    rmSync(d, { recursive: true, force: true });
  }
});

function temp(): string {
  const d = mkdtempSync(join(tmpdir(), "cairn-ws-"));
  dirs.push(d);
  return d;
}

const LIMITS = { maxFileBytes: 1 << 20, maxCheckpointBytes: 8 << 20 };

/** A tiny object store and the two operations, as a workspace uses them. */
function objectStore() {
  const objects = new Map<string, WorkspaceObject>();
  const rules = baseRules({});
  const fetch = async (hashes: string[]) => {
    const out = new Map<string, Buffer>();
    for (const h of hashes) {
      const o = objects.get(h);
      if (o) out.set(h, fromObject(o));
    }
    return out;
  };
  return {
    objects,
    async take(dir: string, cache = new StatCache(), known = new Set<string>()) {
      const scan = await scanForCheckpoint(dir, {
        rules,
        gitignore: true,
        cache,
        limits: LIMITS,
        known: (h) => known.has(h),
        name: "test",
        during: 'step "s"',
      });
      const built = buildTrees(scan.snapshot);
      for (const [h, c] of scan.fresh) objects.set(h, toObject("blob", c, h));
      for (const [h, t] of built.trees) objects.set(h, toObject("tree", t, h));
      return { root: built.root, scan, holds: built.holds };
    },
    async restore(dir: string, root: string, cache = new StatCache()) {
      const { snapshot } = await readTrees(root, fetch);
      return restoreTo(dir, snapshot, { rules, gitignore: true, cache, fetchBlobs: fetch });
    },
    async snapshot(root: string): Promise<Snapshot> {
      return (await readTrees(root, fetch)).snapshot;
    },
  };
}

/** A directory with one of everything a workspace keeps, and some it ignores. */
function seed(dir: string): void {
  mkdirSync(join(dir, "src/util"), { recursive: true });
  mkdirSync(join(dir, "empty"));
  mkdirSync(join(dir, "node_modules/pkg"), { recursive: true });
  writeFileSync(join(dir, "README.md"), "# hello\n");
  writeFileSync(join(dir, "src/index.ts"), "export const x = 1;\n");
  writeFileSync(join(dir, "src/util/helpers.ts"), "export {};\n");
  writeFileSync(join(dir, "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o755 });
  chmodSync(join(dir, "run.sh"), 0o755);
  writeFileSync(join(dir, "secret.txt"), "s", { mode: 0o600 });
  chmodSync(join(dir, "secret.txt"), 0o600);
  writeFileSync(join(dir, "blob.bin"), Buffer.from([0, 1, 2, 255, 254, 0, 10, 13]));
  writeFileSync(join(dir, "ünï 📄.txt"), "unicode name\n");
  writeFileSync(join(dir, ".gitignore"), "*.log\n");
  writeFileSync(join(dir, "build.log"), "ignored by .gitignore");
  writeFileSync(join(dir, "node_modules/pkg/index.js"), "ignored by default");
  symlinkSync("README.md", join(dir, "link"));
  symlinkSync("does/not/exist", join(dir, "dangling"));
  symlinkSync("/etc/hostname", join(dir, "absolute"));
  mkdirSync(join(dir, "locked"));
  writeFileSync(join(dir, "locked/inside.txt"), "in a read-only dir");
  chmodSync(join(dir, "locked"), 0o555);
}

const IGNORED = ["node_modules", "build.log"];

describe("checkpoint and restore", () => {
  it("restores into an empty directory exactly what was checkpointed", async () => {
    const os = objectStore();
    const a = temp();
    seed(a);
    const { root, scan } = await os.take(a);
    expect(scan.snapshot.has("node_modules")).toBe(false);
    expect(scan.snapshot.has("build.log")).toBe(false);
    expect(scan.snapshot.get("empty")?.type).toBe("dir");
    expect(scan.snapshot.get("locked")).toEqual({ type: "dir", mode: 0o555 });
    expect(scan.snapshot.get("run.sh")).toMatchObject({ type: "file", mode: 0o755 });
    expect(scan.snapshot.get("dangling")).toEqual({ type: "symlink", target: "does/not/exist" });
    const b = join(temp(), "elsewhere/deeper");
    await os.restore(b, root);
    expect(treeOf(b)).toEqual(treeOf(a, IGNORED));
    // Taking the restored directory gives the same checkpoint: nothing was lost or added.
    expect((await os.take(b)).root).toBe(root);
  });

  it("a dirty directory is brought back: edits, additions, deletions, modes and type changes", async () => {
    const os = objectStore();
    const a = temp();
    seed(a);
    const { root } = await os.take(a);
    const b = temp();
    seed(b);
    const outside = join(temp(), "outside.txt");
    writeFileSync(outside, "must not change");
    chmodSync(join(b, "locked"), 0o755);
    writeFileSync(join(b, "src/index.ts"), "garbage");
    writeFileSync(join(b, "extra.txt"), "added outside a step");
    mkdirSync(join(b, "extra-dir/sub"), { recursive: true });
    rmSync(join(b, "README.md"));
    chmodSync(join(b, "run.sh"), 0o644);
    rmSync(join(b, "empty"), { recursive: true });
    writeFileSync(join(b, "empty"), "a file where a directory was");
    rmSync(join(b, "src/util"), { recursive: true });
    symlinkSync(outside, join(b, "src/util")); // a symlink where a directory was
    rmSync(join(b, "secret.txt"));
    symlinkSync(outside, join(b, "secret.txt")); // writing the file must not follow this
    rmSync(join(b, "link"));
    mkdirSync(join(b, "link")); // a directory where a symlink was
    writeFileSync(join(b, "link/x"), "x");
    rmSync(join(b, "blob.bin"));
    writeFileSync(join(outside, "..", "hard.bin"), "hard link target");
    linkSync(join(outside, "..", "hard.bin"), join(b, "blob.bin"));
    writeFileSync(join(b, "node_modules/pkg/index.js"), "kept: ignored");
    writeFileSync(join(b, "other.log"), "kept: ignored");
    chmodSync(join(b, "locked"), 0o555);

    await os.restore(b, root);
    expect(treeOf(b, [...IGNORED, "other.log"])).toEqual(treeOf(a, IGNORED));
    expect(readFileSync(outside, "utf8")).toBe("must not change");
    expect(readFileSync(join(outside, "..", "hard.bin"), "utf8")).toBe("hard link target");
    expect(readFileSync(join(b, "node_modules/pkg/index.js"), "utf8")).toBe("kept: ignored");
    expect(readFileSync(join(b, "other.log"), "utf8")).toBe("kept: ignored");
  });

  it("restoring a directory onto the checkpoint it holds changes nothing", async () => {
    const os = objectStore();
    const a = temp();
    seed(a);
    const { root } = await os.take(a);
    const before = treeOf(a);
    expect(await os.restore(a, root)).toEqual({ written: 0, deleted: 0 });
    expect(treeOf(a)).toEqual(before);
  });

  it("a later checkpoint stores only what changed", async () => {
    const os = objectStore();
    const a = temp();
    seed(a);
    const cache = new StatCache();
    const first = await os.take(a, cache);
    const stored = os.objects.size;
    const again = await os.take(a, cache, first.holds);
    expect(again.root).toBe(first.root);
    expect(again.scan.fresh.size).toBe(0);
    writeFileSync(join(a, "src/index.ts"), "export const x = 2;\n");
    writeFileSync(join(a, "copy.md"), "# hello\n"); // same content as README.md
    const second = await os.take(a, cache, first.holds);
    expect([...second.scan.fresh.keys()]).toHaveLength(1);
    // One blob, and the trees of the two directories on its path (root, src).
    expect(os.objects.size - stored).toBe(1 + 2);
  });

  it("refuses a file over maxFileBytes, too much new content, odd file types and non-UTF-8 names", async () => {
    const a = temp();
    writeFileSync(join(a, "big.bin"), Buffer.alloc(2048));
    const scan = (limits = LIMITS) =>
      scanForCheckpoint(a, {
        rules: baseRules({}),
        gitignore: true,
        cache: new StatCache(),
        limits,
        known: () => false,
        name: "w",
        during: 'step "s"',
      });
    await expect(scan({ maxFileBytes: 1024, maxCheckpointBytes: 1 << 20 })).rejects.toThrow(
      /"big.bin" is 2048 bytes, over the limit of 1024 bytes per file/,
    );
    writeFileSync(join(a, "big2.bin"), Buffer.alloc(2048, 1));
    const over = scan({ maxFileBytes: 4096, maxCheckpointBytes: 3000 });
    await expect(over).rejects.toBeInstanceOf(WorkspaceError);
    await expect(over).rejects.toThrow(
      /^Workspace "w", step "s": at least 4096 bytes of new content, over the limit of 3000 bytes per checkpoint \(maxCheckpointBytes\); largest new files: "big2?\.bin" \(2048 bytes\), "big2?\.bin" \(2048 bytes\);/,
    );
    // Both files named, each once (the same size: their order is by name).
    await expect(over).rejects.toThrow(
      /largest new files: "big\.bin" \(2048 bytes\), "big2\.bin" \(2048 bytes\);/,
    );
    const fifo = temp();
    execFileSync("mkfifo", [join(fifo, "pipe")]);
    await expect(
      scanForCheckpoint(fifo, {
        rules: baseRules({}),
        gitignore: true,
        cache: new StatCache(),
        limits: LIMITS,
        known: () => false,
        name: "w",
        during: 'step "s"',
      }),
    ).rejects.toThrow(/neither a file, a directory nor a symlink/);
    const latin = temp();
    writeFileSync(Buffer.from(`${latin}/caf\xe9`, "latin1"), "x");
    await expect(
      scanForCheckpoint(latin, {
        rules: baseRules({}),
        gitignore: true,
        cache: new StatCache(),
        limits: LIMITS,
        known: () => false,
        name: "w",
        during: 'step "s"',
      }),
    ).rejects.toThrow(/is not UTF-8/);
  });

  it("the stat cache vouches for a file only while its stat is unchanged and it is not racy", () => {
    const cache = new StatCache();
    const e = { type: "file" as const, mode: 0o644, size: 3, mtimeMs: 1000, ctimeMs: 1000, ino: 7 };
    cache.remember("a", e, "h1", 5000);
    expect(cache.hashOf("a", e)).toBe("h1");
    expect(cache.hashOf("b", e)).toBeUndefined();
    expect(cache.hashOf("a", { ...e, size: 4 })).toBeUndefined();
    expect(cache.hashOf("a", { ...e, mtimeMs: 1001 })).toBeUndefined();
    expect(cache.hashOf("a", { ...e, ctimeMs: 1001 })).toBeUndefined();
    expect(cache.hashOf("a", { ...e, ino: 8 })).toBeUndefined();
    // Changed within the racy window before it was read: a same-tick rewrite would not show.
    cache.remember("r", { ...e, mtimeMs: 4990, ctimeMs: 4990 }, "h2", 5000);
    expect(cache.hashOf("r", { ...e, mtimeMs: 4990, ctimeMs: 4990 })).toBeUndefined();
    cache.forget("a");
    expect(cache.hashOf("a", e)).toBeUndefined();
  });

  it("an object read back with other bytes than its address is refused", () => {
    const o = toObject("blob", Buffer.from("hello world, compressible? hello world hello world"));
    expect(fromObject(o).toString()).toContain("hello world");
    const tampered = { ...o, data: toObject("blob", Buffer.from("evil")).data };
    expect(() => fromObject(tampered)).toThrow(/does not match its address/);
  });
});

describe("snapshot changes", () => {
  const file = (hash: string, mode = 0o644) => ({ type: "file" as const, mode, hash, size: 1 });
  const dir = { type: "dir" as const, mode: 0o755 };

  it("lists files and symlinks that differ; a directory counts only as what it replaced", () => {
    const before: Snapshot = new Map<string, Entry>([
      ["same.txt", file("a")],
      ["edited.txt", file("a")],
      ["chmod.sh", file("a")],
      ["gone.txt", file("a")],
      ["link", { type: "symlink", target: "x" }],
      ["became-dir", file("a")],
      ["was-dir", dir],
      ["only-dir", dir],
    ]);
    const after: Snapshot = new Map<string, Entry>([
      ["same.txt", file("a")],
      ["edited.txt", file("b")],
      ["chmod.sh", file("a", 0o755)],
      ["link", { type: "symlink", target: "y" }],
      ["became-dir", dir],
      ["was-dir", file("c")],
      ["only-dir", { type: "dir", mode: 0o700 }],
      ["new.txt", file("d")],
    ]);
    const changes = snapshotChanges(before, after);
    expect(changes.map((c) => [c.path, c.change])).toEqual([
      ["edited.txt", "modified"],
      ["chmod.sh", "modified"],
      ["link", "modified"],
      ["was-dir", "added"],
      ["new.txt", "added"],
      ["gone.txt", "deleted"],
      ["became-dir", "deleted"],
    ]);
    expect(changes[0]).toEqual({
      path: "edited.txt",
      change: "modified",
      before: file("a"),
      after: file("b"),
    });
    expect(changes.find((c) => c.path === "gone.txt")).toEqual({
      path: "gone.txt",
      change: "deleted",
      before: file("a"),
    });
    expect(diffSnapshots(before, after)).toEqual({ added: 2, modified: 3, deleted: 2 });
    expect(snapshotChanges(after, after)).toEqual([]);
  });
});
