// Found by differential testing of the .gitignore matching of 3ff3bbe against git 2.39
// (`git status --ignored` in a repository holding the same files): each case is a path git
// keeps that cairn ignored, so a restore elsewhere lost it (or, the last, one git ignores
// that cairn stored). The expected verdicts are git's.

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { isIgnored, parseIgnore } from "../src/workspace/ignore.js";
import { restoreTo } from "../src/workspace/restore.js";
import { baseRules, diskGitignore, StatCache, walk } from "../src/workspace/scan.js";
import { type Entry, hashObject, type Snapshot } from "../src/workspace/tree.js";
import { tempDir } from "./helpers/sqlite.js";

/** Whether git ignores the file `path` under a root .gitignore of `text` (each ancestor
 *  directory judged first: an ignored directory is not entered). */
function ignoredByRoot(text: string, path: string): boolean {
  const sets = [parseIgnore(text)];
  const parts = path.split("/");
  for (let i = 1; i < parts.length; i++) {
    if (isIgnored(sets, parts.slice(0, i).join("/"), true)) return true;
  }
  return isIgnored(sets, path, false);
}

describe(".gitignore patterns as git reads them", () => {
  // git appends a newline to a file that does not end with one, then strips the "\r" of
  // every "\r\n": the last line of a CRLF file without a final newline lost only its "\n"
  // here, so "!keep.log\r" re-included nothing and keep.log was ignored.
  it("the last CRLF line without a final newline loses its \\r", () => {
    expect(ignoredByRoot("*.log\r\n!keep.log\r", "keep.log")).toBe(false);
    expect(ignoredByRoot("*.log\r\n!keep.log\r", "a.log")).toBe(true);
    expect(ignoredByRoot("*.log\r", "a.log")).toBe(true);
  });

  // git's wildmatch reads a run of stars as one "**" ("***/x" is "**/x"): here "***" was a
  // "**" then a "*", neither crossing "/", and "!***/x" re-included only "a/x".
  it("a run of three stars or more is **", () => {
    const text = "x\n!***/x\n";
    for (const p of ["x", "a/x", "a/b/x"]) expect(ignoredByRoot(text, p), p).toBe(false);
    const inner = "x\n!a/***/x\n";
    for (const p of ["a/x", "a/b/x", "a/b/c/x"]) expect(ignoredByRoot(inner, p), p).toBe(false);
    expect(ignoredByRoot("*.log\n!a/***\n", "a/b/b.log")).toBe(false);
    expect(ignoredByRoot("x\n!**/***/x\n", "x")).toBe(false);
    // Not after a "/": a star like any other, as in git.
    expect(ignoredByRoot("x\n!a/***b/x\n", "a/c/b/x")).toBe(true);
    expect(ignoredByRoot("x\n!a/***b/x\n", "a/cb/x")).toBe(false);
  });

  // A pattern that is "**" alone once its leading "/" is gone matches every path, at any
  // depth, in git: here it was a "*" (one name), so "!/**" re-included only top-level paths.
  it('"/**" matches at every depth', () => {
    for (const text of ["*.log\n!/**\n", "*.log\n!/***\n"]) {
      expect(ignoredByRoot(text, "a/b.log"), text).toBe(false);
      expect(ignoredByRoot(text, "c.log"), text).toBe(false);
    }
  });

  // "**" then an escaped "/" crosses directories in git (it is "**" before a "/"), without
  // matching nothing as "**/" does: "**\/x" is a/x and a/b/x, not x.
  it('"**\\/" crosses directories', () => {
    const text = "x\n!**\\/x\n";
    expect(ignoredByRoot(text, "a/b/x")).toBe(false);
    expect(ignoredByRoot(text, "a/x")).toBe(false);
    expect(ignoredByRoot(text, "x")).toBe(true);
  });

  // git takes a trailing "/" as "directories only" whatever comes before it: "foo\\\\/" is
  // the directory "foo\" (an escaped backslash). Here it was no pattern at all (read as an
  // escaped "/"), and the directory was stored.
  it('a "/" after an escaped backslash still means a directory', () => {
    expect(ignoredByRoot("foo\\\\/\n", "foo\\/x")).toBe(true);
    expect(ignoredByRoot("foo\\\\/\n", "foo\\")).toBe(false);
  });
});

describe("the walk, against git's verdicts", () => {
  it("keeps what git keeps, with nested .gitignore files in CRLF", () => {
    const tmp = tempDir();
    try {
      const root = join(tmp.dir, "ws");
      const files = ["keep.log", "a.log", "sub/x", "sub/a/b/x", "sub/y.log", "sub/z.log"];
      for (const f of files) {
        mkdirSync(join(root, f, ".."), { recursive: true });
        writeFileSync(join(root, f), f);
      }
      writeFileSync(join(root, ".gitignore"), "*.log\r\n!keep.log\r");
      writeFileSync(join(root, "sub/.gitignore"), "x\r\n!***/x\r\n!z.log\r");
      const kept = [...walk(root, baseRules({}), diskGitignore(root))]
        .filter(([, e]) => e.type === "file")
        .map(([p]) => p)
        .sort();
      // git status --ignored: ignored a.log, sub/y.log.
      expect(kept).toEqual([
        ".gitignore",
        "keep.log",
        "sub/.gitignore",
        "sub/a/b/x",
        "sub/x",
        "sub/z.log",
      ]);
    } finally {
      tmp.cleanup();
    }
  });
});

describe(".git under a whitelist .gitignore", () => {
  // "*", "!*/", "!*.*" (ignore all, then re-include directories and some files) is a common
  // .gitignore. The default ".git" sat below every .gitignore, so "!*/" re-included .git:
  // the walk entered it and kept its directories, hooks and pack files (git never looks in
  // .git), and a restore elsewhere removed the other repository's packs it did not hold.
  it("no .gitignore pattern re-includes .git while defaultIgnore is on", () => {
    const tmp = tempDir();
    try {
      const root = join(tmp.dir, "ws");
      for (const f of [".git/HEAD", ".git/objects/pack/p.pack", "sub/.git", "a.py", "b.txt"]) {
        mkdirSync(join(root, f, ".."), { recursive: true });
        writeFileSync(join(root, f), f);
      }
      writeFileSync(join(root, ".gitignore"), "*\n!*/\n!*.*\n!.git\n");
      const kept = (o: { defaultIgnore?: boolean }) =>
        [...walk(root, baseRules(o), diskGitignore(root)).keys()].sort();
      expect(kept({})).toEqual([".gitignore", "a.py", "b.txt", "sub"]);
      // defaultIgnore: false leaves .git to the patterns, as documented.
      expect(kept({ defaultIgnore: false })).toContain(".git/objects/pack/p.pack");
    } finally {
      tmp.cleanup();
    }
  });
});

describe("a checkpoint taken while a whitelist re-included .git", () => {
  // Such a checkpoint holds .git entries. The walk no longer sees .git, so a restore found
  // them "not there" and wrote the recorded HEAD and packs over the live repository's.
  it("a restore to it leaves the live .git alone", async () => {
    const tmp = tempDir();
    try {
      const root = join(tmp.dir, "ws");
      mkdirSync(join(root, ".git"), { recursive: true });
      writeFileSync(join(root, ".git/HEAD"), "live");
      const blobs = new Map<string, Buffer>();
      const file = (text: string) => {
        const content = Buffer.from(text);
        const hash = hashObject("blob", content);
        blobs.set(hash, content);
        return { type: "file" as const, mode: 0o644, hash, size: content.byteLength };
      };
      const checkpoint: Snapshot = new Map<string, Entry>([
        [".git", { type: "dir", mode: 0o755 }],
        [".git/HEAD", file("recorded")],
        ["a.py", file("a")],
      ]);
      await restoreTo(root, checkpoint, {
        rules: baseRules({}),
        gitignore: true,
        cache: new StatCache(),
        fetchBlobs: async (hashes) => new Map(hashes.map((h) => [h, blobs.get(h)!])),
      });
      expect(readFileSync(join(root, ".git/HEAD"), "utf8")).toBe("live");
      expect(readFileSync(join(root, "a.py"), "utf8")).toBe("a");
    } finally {
      tmp.cleanup();
    }
  });
});
