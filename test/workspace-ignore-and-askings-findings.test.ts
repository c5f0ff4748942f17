// Found by an adversarial review of the workspace and approval mends of 15af128 (overlap, nested steps,
// forged trees, .gitignore classes and trailing spaces, .cairn always ignored, approvals
// by name, reopened deadlines): each test is a bug found, and failed before its mend.

import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { CAIRN_IGNORE, isIgnored, parseIgnore } from "../src/workspace/ignore.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { tempDir, until } from "./helpers/sqlite.js";

describe("a checkpoint recorded before .cairn was always ignored", () => {
  const harness = useHarness("sqlite");

  // Checkpoints taken with defaultIgnore: false before 15af128 hold .cairn (the project's
  // store). The walk now never sees .cairn, so a restore to such a checkpoint found the
  // live file "not there", and wrote the recorded one over it (removing the live one in
  // the way): the store a worker has open was rewritten with a stale copy.
  it("a restore to it leaves the live .cairn alone", async () => {
    const h = harness();
    const tmp = tempDir();
    const dir = join(tmp.dir, "proj");
    mkdirSync(join(dir, ".cairn"), { recursive: true });
    writeFileSync(join(dir, ".cairn/state"), "recorded");
    let stop = true;
    const wf = workflow({ name: "old-cairn-ckpt", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir, defaultIgnore: false });
      await ctx.step("stop", () => {
        if (stop) throw new FatalError("stop");
      });
      await ws
        .step("boom", () => {
          writeFileSync(join(dir, "x.txt"), "x");
          throw new FatalError("rolled back");
        })
        .catch(() => {});
      return ws.step("look", () => readFileSync(join(dir, ".cairn/state"), "utf8"));
    });
    const saved = CAIRN_IGNORE.splice(0); // the rules before 15af128
    try {
      const e = h.engine([wf]);
      await e.start(wf, undefined, { id: "old" });
      await expect(e.handle("old").result()).rejects.toThrow(/stop/);
      CAIRN_IGNORE.push(...saved);
      writeFileSync(join(dir, ".cairn/state"), "live");
      stop = false;
      await e.resume("old");
      expect(await e.handle("old").result()).toBe("live");
      expect(existsSync(join(dir, "x.txt"))).toBe(false);
    } finally {
      if (CAIRN_IGNORE.length === 0) CAIRN_IGNORE.push(...saved);
      tmp.cleanup();
    }
  });
});

describe(".gitignore patterns as git reads them (more of git check-ignore's answers)", () => {
  // A path cairn ignores and git keeps is left out of every checkpoint: a restore elsewhere
  // loses it. A reversed range ("z-a") made the class an invalid regular expression and the
  // whole line was dropped (git: the range matches nothing, the rest of the class does; a
  // dropped "!" line ignored what git keeps). An escaped backslash before trailing spaces
  // kept the spaces (git trims them: "foo\\\\ " ignores "foo\\", not "foo\\ ").
  const cases: Array<[pattern: string, path: string, ignored: boolean]> = [
    ["[z-ab]x", "bx", true],
    ["[z-ab]x", "zx", true],
    ["[^z-a]x", "bx", true],
    ["*\n![z-ab]x", "bx", false],
    ["foo\\\\ ", "foo\\", true],
    ["foo\\\\ ", "foo\\ ", false],
    ["foo\\\\\\  ", "foo\\ ", true],
  ];
  for (const [pattern, path, ignored] of cases) {
    it(`${JSON.stringify(pattern)} ${ignored ? "ignores" : "keeps"} ${JSON.stringify(path)}`, () => {
      expect(isIgnored([parseIgnore(pattern)], path, false)).toBe(ignored);
    });
  }
});

describe(".gitignore patterns git's wildmatch matches nothing with, or matches byte by byte", () => {
  // cairn read an unclosed "[" and a trailing "\\" as literal characters, and matched "?"
  // and classes against a UTF-16 unit: each ignored a path git keeps (lost on a restore
  // elsewhere). git gives up on the first two (they match nothing) and matches bytes.
  const cases: Array<[pattern: string, path: string, ignored: boolean]> = [
    ["foo[bar", "foo[bar", false],
    ["[x", "[x", false],
    ["x\\", "x\\", false],
    ["x[[:foo:]]", "x[[:foo:]]", false],
    ["caf?", "café", false],
    ["caf??", "café", true],
    ["caf[!a]", "café", false],
    ["caf[é]", "café", false],
    ["café", "café", true],
    ["[[:space:]]x", "\vx", false],
    ["[[:space:]]x", "\tx", true],
    ["[\\a-c]x", "bx", true],
    ["[a-c-e]x", "dx", false],
    ["[a-c-e]x", "-x", true],
    ["[[:alpha:]-z]x", "-x", true],
  ];
  // A .gitignore saved with a byte order mark: its first line was "\uFEFF!keep.log", which
  // re-included nothing, so cairn ignored sub/keep.log where git keeps it.
  it("a byte order mark is not part of the first pattern", () => {
    const sets = [parseIgnore("*.log"), parseIgnore("\uFEFF!keep.log\n", "sub")];
    expect(isIgnored(sets, "sub/keep.log", false)).toBe(false);
    expect(isIgnored(sets, "sub/x.log", false)).toBe(true);
  });
  it('"foo//" ignores no directory "foo" (git strips one "/" only)', () => {
    expect(isIgnored([parseIgnore("foo//")], "foo", true)).toBe(false);
    expect(isIgnored([parseIgnore("foo/")], "foo", true)).toBe(true);
  });
  for (const [pattern, path, ignored] of cases) {
    it(`${JSON.stringify(pattern)} ${ignored ? "ignores" : "keeps"} ${JSON.stringify(path)}`, () => {
      expect(isIgnored([parseIgnore(pattern)], path, false)).toBe(ignored);
    });
  }
});

describe.each(BACKENDS)(
  "approvals asked in a loop whose earlier askings timed out (%s)",
  (backend) => {
    const harness = useHarness(backend);

    // A timed-out asking stays "pending" in the store (its view says "timed-out"): the name
    // meant the first asking, long timed out, and the answer was refused as past its
    // deadline; two timed-out askings before the waiting one were "2 pending, give the key".
    it("the name means the asking that waits, not one that timed out", async () => {
      const h = harness();
      const wf = workflow({ name: "merge-timeouts", version: "1" }, async (ctx) => {
        const out: Array<boolean | "timed out"> = [];
        for (let i = 0; i < 3; i++) {
          const a = await ctx.approval("merge", { request: { round: i }, timeout: "1h" });
          out.push(a.timedOut ? "timed out" : a.approved);
        }
        return out;
      });
      const e = h.engine([wf]);
      await e.start(wf, undefined, { id: "late" });
      const waitsFor = (key: string) =>
        until(
          async () => (await e.getRun("late"))?.waitingFor?.[0] === `cairn.approval:${key}`,
          key,
        );
      await waitsFor("merge");
      await h.clock.advance(2 * 3_600_000);
      await waitsFor("merge#2");
      expect((await e.approve("late", "merge", { by: "ann" })).key).toBe("merge#2");
      await waitsFor("merge#3");
      await h.clock.advance(2 * 3_600_000);
      await until(async () => (await e.getRun("late"))?.status === "completed", "done");
      expect(await e.handle("late").result()).toEqual(["timed out", true, "timed out"]);
    });

    it("two timed-out askings before the waiting one are not two pending ones", async () => {
      const h = harness();
      const wf = workflow({ name: "merge-timeouts-2", version: "1" }, async (ctx) => {
        const out: Array<boolean | "timed out"> = [];
        for (let i = 0; i < 3; i++) {
          const a = await ctx.approval("merge", { request: { round: i }, timeout: "1h" });
          out.push(a.timedOut ? "timed out" : a.approved);
        }
        return out;
      });
      const e = h.engine([wf]);
      await e.start(wf, undefined, { id: "late2" });
      const waitsFor = (key: string) =>
        until(
          async () => (await e.getRun("late2"))?.waitingFor?.[0] === `cairn.approval:${key}`,
          key,
        );
      await waitsFor("merge");
      await e.approve("late2", "merge", { by: "ann" });
      await waitsFor("merge#2");
      await h.clock.advance(2 * 3_600_000);
      await waitsFor("merge#3");
      expect((await e.reject("late2", "merge", { by: "bob" })).key).toBe("merge#3");
      expect(await e.handle("late2").result()).toEqual([true, "timed out", false]);
    });
  },
);

describe("a project whose own patterns re-include .cairn", () => {
  const harness = useHarness("sqlite");

  // .cairn was the first of the workspace's patterns, below every .gitignore file and every
  // option pattern: a "!.cairn" there (or the "*" / "!*/" idiom with "!*.db") re-included
  // cairn's store, and a restore wrote it back under the open connection again.
  it("leaves .cairn out of the checkpoint all the same", async () => {
    const h = harness();
    const tmp = tempDir();
    const dir = join(tmp.dir, "proj");
    mkdirSync(join(dir, ".cairn"), { recursive: true });
    writeFileSync(join(dir, ".cairn/cairn.db"), "store");
    writeFileSync(join(dir, ".gitignore"), "*\n!*/\n!*.db\n!.gitignore\n");
    const wf = workflow({ name: "reincluded-cairn", version: "1" }, async (ctx) => {
      const a = await ctx.workspace("a", { dir });
      const b = await ctx.workspace("b", { dir: join(tmp.dir, "other"), ignore: ["!.cairn"] });
      await b.step("write", () => {
        mkdirSync(join(b.dir, ".cairn"), { recursive: true });
        writeFileSync(join(b.dir, ".cairn/x"), "x");
      });
      return [a.checkpoint, b.checkpoint];
    });
    try {
      const e = h.engine([wf]);
      await e.start(wf, undefined, { id: "re" });
      const checkpoints = (await e.handle("re").result()) as string[];
      for (const c of checkpoints) {
        const paths = (await e.readCheckpoint("re", c)).map((x) => x.path);
        expect(paths.filter((p) => p.split("/").includes(".cairn"))).toEqual([]);
      }
    } finally {
      tmp.cleanup();
    }
  });
});
