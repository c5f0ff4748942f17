// Adversarial tests of workspaces, fork, retention and encryption: each a repro of a bug
// found by an audit, failing before its mend.

import { execFileSync } from "node:child_process";
import {
  chmodSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import type { WorkflowContext } from "../src/workflow/context-types.js";
import { WorkspaceHandle } from "../src/workspace/workspace.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { tempDir } from "./helpers/sqlite.js";

describe.each(BACKENDS)("fork and retention (%s)", (backend) => {
  const harness = useHarness(backend);

  it("gc of the source right after a fork (before the fork first runs) keeps the checkpoints the fork restores from", async () => {
    const h = harness();
    const tmp = tempDir();
    const content = "inherited by the fork\n".repeat(50);
    const wf = workflow({ name: "fork-gc-early", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo");
      await ws.step("write", () => writeFileSync(join(ws.dir, "f.txt"), content));
      await ctx.step("mark", () => 1);
      return ws.step("read", () => readFileSync(join(ws.dir, "f.txt"), "utf8").length);
    });
    const opts = (worker: boolean) => ({ worker, workspaceRoot: join(tmp.dir, "ws") });
    try {
      const first = h.engine([wf], opts(true));
      await first.start(wf, undefined, { id: "P" });
      expect(await first.handle("P").result()).toBe(content.length);
      await first.close();
      // A client (no worker) forks P, then retention runs before any worker took the fork.
      const client = h.engine([wf], opts(false));
      await client.fork("P", { fromStep: "mark", id: "F" });
      await h.clock.advance(60_000);
      const gc = await client.gc({ olderThan: "1s" });
      expect(gc.runs).toBe(1); // P goes; F is pending
      await client.close();
      rmSync(join(tmp.dir, "ws"), { recursive: true, force: true }); // another machine
      const second = h.engine([wf], opts(true));
      expect(await second.handle("F").result()).toBe(content.length);
    } finally {
      tmp.cleanup();
    }
  });

  it("a fork holds every checkpoint its journal names: the source's earlier ones stay readable through it after the source is deleted", async () => {
    const h = harness();
    const tmp = tempDir();
    const wf = workflow({ name: "fork-gc-inspect", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo");
      await ws.step("one", () => writeFileSync(join(ws.dir, "f.txt"), "version one\n"));
      await ws.step("two", () => writeFileSync(join(ws.dir, "f.txt"), "version two\n"));
      await ctx.step("mark", () => 1);
      return ws.step("read", () => readFileSync(join(ws.dir, "f.txt"), "utf8"));
    });
    try {
      const engine = h.engine([wf], { workspaceRoot: join(tmp.dir, "ws") });
      await engine.start(wf, undefined, { id: "P" });
      expect(await engine.handle("P").result()).toBe("version two\n");
      const one = (await engine.listWorkspaces("P"))[0]!.checkpoints.find((c) => c.step === "one")!;
      await h.clock.advance(60_000);
      await engine.fork("P", { fromStep: "mark", id: "F" });
      expect(await engine.handle("F").result()).toBe("version two\n");
      const gc = await engine.gc({ olderThan: "30s" }); // P only
      expect(gc.runs).toBe(1);
      const [repo] = await engine.listWorkspaces("F");
      expect(repo!.checkpoints.find((c) => c.step === "one")!.checkpoint).toBe(one.checkpoint);
      const file = await engine.readWorkspaceFile("F", one.checkpoint, "f.txt");
      expect(Buffer.from(file.content).toString()).toBe("version one\n");
    } finally {
      tmp.cleanup();
    }
  });
});

describe("workspace restore and hard links", () => {
  const harness = useHarness("sqlite");

  it("a rolled-back step that hard-linked two files leaves each with its checkpointed mode", async () => {
    const h = harness();
    const tmp = tempDir();
    const wf = workflow({ name: "hardlink-modes", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo");
      await ws.step("setup", () => {
        writeFileSync(join(ws.dir, "a.txt"), "same\n", { mode: 0o644 });
        writeFileSync(join(ws.dir, "b.sh"), "same\n", { mode: 0o755 });
        chmodSync(join(ws.dir, "a.txt"), 0o644);
        chmodSync(join(ws.dir, "b.sh"), 0o755);
      });
      // A step that replaces b.sh by a hard link to a.txt, then fails: rolled back.
      await ws
        .step("relink", () => {
          rmSync(join(ws.dir, "b.sh"));
          linkSync(join(ws.dir, "a.txt"), join(ws.dir, "b.sh"));
          throw new FatalError("gives up");
        })
        .catch(() => {});
      return ws.step("modes", () =>
        ["a.txt", "b.sh"].map((f) => (statSync(join(ws.dir, f)).mode & 0o777).toString(8)),
      );
    });
    try {
      const engine = h.engine([wf], { workspaceRoot: join(tmp.dir, "ws") });
      const run = await engine.start(wf, undefined);
      expect(await run.result()).toEqual(["644", "755"]);
    } finally {
      tmp.cleanup();
    }
  });

  it("restoring a file's mode never changes a file outside the workspace hard-linked to it", async () => {
    const h = harness();
    const tmp = tempDir();
    const outside = join(tmp.dir, "outside.txt");
    const wf = workflow({ name: "hardlink-outside", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo");
      await ws.step("setup", () => {
        writeFileSync(join(ws.dir, "f.txt"), "same\n");
        chmodSync(join(ws.dir, "f.txt"), 0o644);
      });
      // Outside any workspace step: the directory's f.txt becomes a hard link to a file
      // elsewhere with another mode. The next step restores the checkpoint first.
      await ctx.step("outside", () => {
        writeFileSync(outside, "same\n");
        chmodSync(outside, 0o600);
        rmSync(join(ws.dir, "f.txt"));
        linkSync(outside, join(ws.dir, "f.txt"));
      });
      return ws.step("read", () => (statSync(join(ws.dir, "f.txt")).mode & 0o777).toString(8));
    });
    try {
      const engine = h.engine([wf], { workspaceRoot: join(tmp.dir, "ws") });
      const run = await engine.start(wf, undefined);
      expect(await run.result()).toBe("644");
      expect((statSync(outside).mode & 0o777).toString(8)).toBe("600");
    } finally {
      tmp.cleanup();
    }
  });
});

describe("a workspace directory that cannot be one", () => {
  const harness = useHarness("sqlite");

  for (const kind of ["a file", "a symlink loop", "a dangling symlink"] as const) {
    it(`a dir that is ${kind} fails the run at once with a WorkspaceError naming the directory`, async () => {
      const h = harness();
      const tmp = tempDir();
      const target = join(tmp.dir, "target");
      if (kind === "a file") writeFileSync(target, "x");
      if (kind === "a symlink loop") symlinkSync(target, target);
      if (kind === "a dangling symlink") symlinkSync(join(tmp.dir, "nowhere"), target);
      const wf = workflow({ name: "bad-dir", version: "1" }, async (ctx) => {
        const ws = await ctx.workspace("repo", { dir: target });
        return ws.step("s", () => 1);
      });
      try {
        const engine = h.engine([wf]);
        const run = await engine.start(wf, undefined);
        // Not retried as a passing fault (with a virtual clock a retry would never come).
        const err = await run.result().then(
          () => undefined,
          (e: Error) => e,
        );
        expect(err?.name).toBe("WorkspaceError");
        expect(err?.message).toContain(`Workspace directory "${target}"`);
      } finally {
        tmp.cleanup();
      }
    });
  }
});

describe("a run id started again after retention", () => {
  const harness = useHarness("sqlite");

  // A workspace opened without `dir` lives in <workspaceRoot>/<run id>/<name>, which nothing
  // removes when its run finishes or is deleted. Once retention deleted a run, its id can be
  // started again as a new run (docs/API.md, gc), and that new run's workspace opened the
  // deleted run's directory: its base checkpoint was the old run's files, stored again (what
  // retention deleted came back under another run). Now a run's first opening empties it.
  it("a new run under a deleted run's id opens an empty default workspace, not the deleted run's files", async () => {
    const h = harness();
    const tmp = tempDir();
    let first = true;
    const wf = workflow({ name: "reuse-id", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo");
      const seen = await ws.step("look", () => readdirSync(ws.dir).sort());
      if (first) await ws.step("write", () => writeFileSync(join(ws.dir, "secret.txt"), "old\n"));
      return seen;
    });
    try {
      const engine = h.engine([wf], { workspaceRoot: join(tmp.dir, "ws") });
      expect(await (await engine.start(wf, undefined, { id: "R" })).result()).toEqual([]);
      await h.clock.advance(60_000);
      expect((await engine.gc({ olderThan: "1s" })).runs).toBe(1);
      first = false;
      expect(await (await engine.start(wf, undefined, { id: "R" })).result()).toEqual([]);
    } finally {
      tmp.cleanup();
    }
  });
});

describe("names that are not UTF-8", () => {
  const harness = useHarness("sqlite");

  it("an ignored entry whose name is not UTF-8 is ignored like any other, as the error for it advises", async () => {
    const h = harness();
    const tmp = tempDir();
    const dir = join(tmp.dir, "repo");
    mkdirSync(join(dir, "sub"), { recursive: true });
    writeFileSync(join(dir, "keep.txt"), "kept\n");
    // Left by a tool: names in Latin-1, one file and one directory, both ignored.
    writeFileSync(Buffer.from(`${dir}/caf\xe9.tmp`, "latin1"), "ignored");
    mkdirSync(Buffer.from(`${dir}/sub/r\xe9sum\xe9-cache`, "latin1"));
    const wf = workflow({ name: "latin1-ignored", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir, ignore: ["*.tmp", "*-cache/"] });
      return ws.step("edit", () => {
        writeFileSync(join(ws.dir, "keep.txt"), "edited\n");
        return "ok";
      });
    });
    try {
      const engine = h.engine([wf]);
      const run = await engine.start(wf, undefined);
      expect(await run.result()).toBe("ok");
      const [repo] = await engine.listWorkspaces(run.id);
      const files = await engine.readCheckpoint(run.id, repo!.checkpoints.at(-1)!.checkpoint);
      expect(files.map((f) => f.path).sort()).toEqual(["keep.txt", "sub"]);
      // The ignored entries are left where they were.
      expect(readdirSync(dir, { encoding: "buffer" }).length).toBe(3);
    } finally {
      tmp.cleanup();
    }
  });
});

describe("workspace options of the wrong type", () => {
  const harness = useHarness("sqlite");

  // `ignore: "*.log"` (a string, from JavaScript or a JSON config) was spread into the
  // patterns "*", ".", "l", "o", "g": "*" ignores every path, so nothing was checkpointed
  // and a resume elsewhere found an empty directory. Refused, naming the option.
  it("ignore given as a string fails the run with a TypeError naming the option, not a workspace that keeps nothing", async () => {
    const h = harness();
    const tmp = tempDir();
    const wf = workflow({ name: "bad-options", version: "1" }, async (ctx) => {
      // biome-ignore lint/suspicious/noExplicitAny: the wrong type is the point
      const ws = await ctx.workspace("repo", { ignore: "*.log" as any });
      await ws.step("write", () => writeFileSync(join(ws.dir, "a.txt"), "kept\n"));
      return "opened";
    });
    try {
      const engine = h.engine([wf], { workspaceRoot: join(tmp.dir, "ws") });
      const run = await engine.start(wf, undefined);
      const err = await run.result().then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err?.name).toBe("TypeError");
      expect(err?.message).toContain('ctx.workspace("repo"): ignore');
    } finally {
      tmp.cleanup();
    }
  });

  // An empty `dir` resolved to the process's working directory, which the workspace then
  // checkpointed and restored (deleting what its checkpoint did not hold).
  for (const [what, options] of [
    ["ignore with a non-string entry", { ignore: ["dist", 7] }],
    ["gitignore as a string", { gitignore: "false" }],
    ["defaultIgnore as a number", { defaultIgnore: 0 }],
    ["dir as a number", { dir: 42 }],
    ["dir empty", { dir: "" }],
  ] as const) {
    it(`${what} is a TypeError naming the option`, () => {
      const ctx = { runId: "run-x" } as unknown as WorkflowContext;
      // biome-ignore lint/suspicious/noExplicitAny: the wrong types are the point
      expect(() => new WorkspaceHandle("repo", ctx, undefined, options as any)).toThrow(
        new RegExp(`^ctx\\.workspace\\("repo"\\): ${Object.keys(options)[0]} `),
      );
    });
  }
});

describe("fork arguments", () => {
  const harness = useHarness("sqlite");

  it("fork without options, or with a fromStep that is not text, is a TypeError naming fromStep and the run", async () => {
    const h = harness();
    const wf = workflow({ name: "fork-args", version: "1" }, async (ctx) => ctx.step("a", () => 1));
    const engine = h.engine([wf]);
    await (await engine.start(wf, undefined, { id: "P" })).result();
    // biome-ignore lint/suspicious/noExplicitAny: the wrong arguments are the point
    const fork = engine.fork as (...args: any[]) => Promise<unknown>;
    for (const args of [[], [null], [{ fromStep: 5 }]]) {
      await expect(fork("P", ...args)).rejects.toThrow(/^fork\(\): fromStep .*run "P"/);
    }
    expect((await engine.listRuns({})).map((r) => r.id)).toEqual(["P"]);
  });
});

describe("two workspaces of a run on one directory", () => {
  const harness = useHarness("sqlite");

  // Each workspace restores the directory to its own checkpoint before its steps, so two on
  // one directory undo each other's changes; the second opening is refused, naming both.
  it("opening a second workspace on the directory of an open one is a TypeError naming both", async () => {
    const h = harness();
    const tmp = tempDir();
    const dir = join(tmp.dir, "repo");
    const wf = workflow({ name: "same-dir", version: "1" }, async (ctx) => {
      const a = await ctx.workspace("a", { dir });
      await a.step("write", () => writeFileSync(join(a.dir, "a.txt"), "from a\n"));
      const b = await ctx.workspace("b", { dir: `${dir}/.` });
      await b.step("noop", () => 1);
      return a.step("read", () => readFileSync(join(a.dir, "a.txt"), "utf8"));
    });
    try {
      const engine = h.engine([wf]);
      const run = await engine.start(wf, undefined);
      const err = await run.result().then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err?.name).toBe("TypeError");
      expect(err?.message).toMatch(/ctx\.workspace\("b"\).*workspace "a"/);
    } finally {
      tmp.cleanup();
    }
  });
});

describe("ignore patterns from a cloned repository", () => {
  // A .gitignore is the workspace's content: an agent that clones a repository runs its
  // patterns. Compiled to regular expressions, "*a*a*a*a*a*a*a*a*b" backtracked
  // polynomially (about the 9th power of a name's length: minutes for 40 characters, ages
  // for 200), inside the synchronous walk, holding the worker's event loop and its leases.
  // Matched in a child process so that the unmended code fails the test instead of hanging
  // the test runner; the bound (60 s) is for a match that now takes milliseconds.
  it("a pathological pattern is matched in time linear in the path", () => {
    const ignoreTs = fileURLToPath(new URL("../src/workspace/ignore.ts", import.meta.url));
    const code = `
      import { isIgnored, parseIgnore } from ${JSON.stringify(ignoreTs)};
      const a = isIgnored([parseIgnore("*a*a*a*a*a*a*a*a*b")], "a".repeat(200), false);
      const b = isIgnored([parseIgnore("**/**/**/**/**/**/**/**/**/x")], "a/".repeat(100) + "y", false);
      const c = isIgnored([parseIgnore("*a*a*a*a*a*a*a*a*b")], "a".repeat(200) + "b", false);
      process.stdout.write(JSON.stringify([a, b, c]));
    `;
    const out = execFileSync(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", code],
      { timeout: 60_000, encoding: "utf8" },
    );
    expect(JSON.parse(out)).toEqual([false, false, true]);
  });
});
