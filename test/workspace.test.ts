// Workspace checkpoints through the engine, on both backends: a resume on another path
// restores the directory before anything executes; a failed step leaves the last
// checkpoint; steps of one workspace run one at a time; ignore rules and limits; content
// stored once and pruned with the last run that holds it; a step's checkpoint is stored
// before its record.

import { appendFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { decode } from "../src/codec/codec.js";
import {
  type AnyWorkflow,
  type Store,
  type Workspace,
  WorkspaceError,
  workflow,
} from "../src/index.js";
import type { WorkspaceObject } from "../src/store/workspace-records.js";
import { checkReplay, faultyStore } from "../src/testing/index.js";
import { fromObject, hashObject, readTrees } from "../src/workspace/tree.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { tempDir, until } from "./helpers/sqlite.js";
import { treeOf } from "./helpers/tree.js";

const dirs: Array<() => void> = [];
function temp(): string {
  const t = tempDir("cairn-ws-test-");
  dirs.push(t.cleanup);
  return t.dir;
}

function seedRepo(dir: string): void {
  mkdirSync(join(dir, "src"), { recursive: true });
  writeFileSync(join(dir, "README.md"), "# repo\n");
  writeFileSync(join(dir, "src/a.ts"), "export const a = 1;\n");
  writeFileSync(join(dir, "src/b.ts"), "export const b = 2;\n");
  writeFileSync(join(dir, "old.txt"), "to be deleted\n");
}

interface StepResult {
  "cairn.workspace": string;
  checkpoint: string;
  changes: { added: number; modified: number; deleted: number };
}

/** The checkpoint a completed workspace step recorded. */
async function recordedCheckpoint(h: Harness, runId: string, key: string): Promise<StepResult> {
  const store = h.store();
  await store.open({ clock: h.clock });
  try {
    const journal = await store.loadJournal(runId);
    const rec = journal.steps.find((s) => s.key === key);
    if (!rec?.result) throw new Error(`no record of "${key}"`);
    return decode<StepResult>(rec.result);
  } finally {
    await store.close();
  }
}

/** Every object hash a checkpoint holds, read through the store. */
async function holdsOf(store: Store, root: string): Promise<string[]> {
  const { holds } = await readTrees(root, async (hashes) => {
    const out = new Map<string, Buffer>();
    for (const o of await store.getWorkspaceObjects(hashes)) out.set(o.hash, fromObject(o));
    return out;
  });
  return [...holds];
}

describe.each(BACKENDS)("workspaces on %s", (backend) => {
  const harness = useHarness(backend);

  it("a resume in an empty directory elsewhere restores the last checkpoint before anything executes", async () => {
    const h = harness();
    const a = temp();
    const b = join(temp(), "another", "path");
    seedRepo(a);
    let dir = a;
    let hang = true;
    let lookStarted = false;
    const wf = workflow({ name: "ws-resume", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      const changed = await ws.step("edit", () => {
        writeFileSync(join(ws.dir, "src/a.ts"), "export const a = 42;\n");
        writeFileSync(join(ws.dir, "src/new.ts"), "new\n");
        rmSync(join(ws.dir, "old.txt"));
        return "edited";
      });
      // A plain step that reads the directory: after the resume it must see the edit.
      const seen = await ctx.step("look", async () => {
        if (hang) {
          lookStarted = true;
          await new Promise(() => {}); // the first worker dies here
        }
        return treeOf(ws.dir);
      });
      const final = await ws.step("check", () => treeOf(ws.dir));
      return { changed, seen, final, dir: ws.dir };
    });
    const first = crashableEngine(h, [wf]);
    const run = await first.engine.start(wf, undefined);
    await until(() => lookStarted, "edit is recorded and look runs");
    const atEdit = treeOf(a);
    first.crash();
    expect((await recordedCheckpoint(h, run.id, "edit")).changes).toEqual({
      added: 1,
      modified: 1,
      deleted: 1,
    });

    dir = b;
    hang = false;
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    const out = (await advanceUntil(h.clock, second.handle(run.id).result(), 30_000)) as {
      changed: string;
      seen: unknown;
      final: unknown;
      dir: string;
    };
    expect(out.dir).toBe(b);
    expect(out.changed).toBe("edited");
    expect(out.seen).toEqual(atEdit);
    expect(out.final).toEqual(atEdit);
    expect(treeOf(b)).toEqual(atEdit);
  });

  it("a failed attempt is rolled back, the retry starts from the checkpoint, a final failure leaves it", async () => {
    const h = harness();
    const a = temp();
    seedRepo(a);
    const sawAtStart: unknown[] = [];
    const wf = workflow({ name: "ws-fail", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir: a });
      const attempts = await ws.step(
        "flaky",
        (s) => {
          sawAtStart.push(treeOf(ws.dir));
          writeFileSync(join(ws.dir, "src/a.ts"), `attempt ${s.attempt}\n`);
          writeFileSync(join(ws.dir, `partial-${s.attempt}.txt`), "half done");
          if (s.attempt < 3) throw new Error(`attempt ${s.attempt} fails mid-edit`);
          rmSync(join(ws.dir, `partial-${s.attempt}.txt`));
          return s.attempt;
        },
        { retry: { maxAttempts: 3, initialDelay: 0, jitter: false } },
      );
      const afterFlaky = treeOf(ws.dir);
      let caught = "";
      try {
        await ws.step(
          "doomed",
          () => {
            rmSync(join(ws.dir, "README.md"));
            writeFileSync(join(ws.dir, "junk.txt"), "junk");
            throw new Error("gave up");
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch (err) {
        caught = (err as Error).message;
      }
      const afterDoomed = treeOf(ws.dir);
      const plain = await ctx.step("plain", () => treeOf(ws.dir));
      return { attempts, afterFlaky, afterDoomed, plain, caught };
    });
    const e = h.engine([wf]);
    const initial = treeOf(a);
    const run = await e.start(wf, undefined);
    const out = (await advanceUntil(h.clock, run.result(), 1_000)) as Record<string, unknown>;
    expect(out.attempts).toBe(3);
    expect(sawAtStart).toEqual([initial, initial, initial]);
    expect(out.caught).toBe("gave up");
    expect(out.afterDoomed).toEqual(out.afterFlaky);
    expect(out.plain).toEqual(out.afterFlaky);
    expect(Object.keys(out.afterFlaky as object)).not.toContain("partial-1.txt");
    expect(readFileSync(join(a, "src/a.ts"), "utf8")).toBe("attempt 3\n");
  });

  it("steps of one workspace run one at a time, in call order, and replay", async () => {
    const h = harness();
    const a = temp();
    const log: string[] = [];
    const wf = workflow({ name: "ws-serial", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir: a });
      const one = (n: number) =>
        ws.step(`append-${n}`, async () => {
          log.push(`enter ${n}`);
          await new Promise((r) => setTimeout(r, 5));
          appendFileSync(join(ws.dir, "lines.txt"), `${n}\n`);
          log.push(`leave ${n}`);
          return n;
        });
      const [x, y, z] = await Promise.all([one(1), one(2), one(3)]);
      return { x, y, z, lines: readFileSync(join(ws.dir, "lines.txt"), "utf8") };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    const out = await run.result();
    expect(out).toEqual({ x: 1, y: 2, z: 3, lines: "1\n2\n3\n" });
    expect(log).toEqual(["enter 1", "leave 1", "enter 2", "leave 2", "enter 3", "leave 3"]);
    const checked = await checkReplay({ store: h.store(), workflows: [wf], runIds: [run.id] });
    expect(checked.map((c) => c.verdict)).toEqual(["ok"]);
    const steps = await recordedCheckpoint(h, run.id, "append-3");
    expect(steps.changes).toEqual({ added: 0, modified: 1, deleted: 0 });
  });

  it("ignored paths are neither recorded nor restored over; a file over the limit fails the step at once", async () => {
    const h = harness();
    const a = temp();
    seedRepo(a);
    writeFileSync(join(a, ".gitignore"), "*.log\n");
    let attempts = 0;
    const wf = workflow({ name: "ws-ignore", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir: a, maxFileBytes: 1000, ignore: ["tmp/"] });
      await ws.step("deps", () => {
        mkdirSync(join(ws.dir, "node_modules/x"), { recursive: true });
        writeFileSync(join(ws.dir, "node_modules/x/big.js"), "x".repeat(5000));
        mkdirSync(join(ws.dir, "tmp"));
        writeFileSync(join(ws.dir, "tmp/scratch"), "y".repeat(5000));
        writeFileSync(join(ws.dir, "build.log"), "z".repeat(5000));
      });
      try {
        await ws.step("too-big", () => {
          attempts++;
          writeFileSync(join(ws.dir, "huge.bin"), Buffer.alloc(2000));
        });
      } catch (err) {
        return { error: err instanceof WorkspaceError, message: (err as Error).message };
      }
      return { error: false };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    const out = (await run.result()) as { error: boolean; message: string };
    expect(out.error).toBe(true);
    expect(out.message).toMatch(/"huge.bin" is 2000 bytes, over the limit of 1000 bytes per file/);
    expect(attempts).toBe(1);
    const deps = await recordedCheckpoint(h, run.id, "deps");
    expect(deps.changes).toEqual({ added: 0, modified: 0, deleted: 0 });
    // The failed step was rolled back; ignored content was left alone.
    const tree = treeOf(a);
    expect(tree["huge.bin"]).toBeUndefined();
    expect(tree["node_modules/x/big.js"]).toBeDefined();
    expect(tree["tmp/scratch"]).toBeDefined();
    expect(tree["build.log"]).toBeDefined();
  });

  it("a step whose new content together exceeds maxCheckpointBytes fails at once, is rolled back and records nothing", async () => {
    const h = harness();
    const a = temp();
    seedRepo(a);
    let attempts = 0;
    const fill = (c: string, n: number) => Buffer.from(c.repeat(n));
    const tooMuch = [fill("e", 900), fill("f", 900), fill("g", 701)]; // 2501 new bytes
    const wf = workflow({ name: "ws-checkpoint-limit", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", {
        dir: a,
        maxFileBytes: 1000,
        maxCheckpointBytes: 2500,
      });
      await ws.step("fits", () => writeFileSync(join(ws.dir, "a.bin"), fill("a", 900)));
      // Exactly at the limit: content the checkpoint already holds (a copy of a.bin) and
      // content found twice in one scan count once, or not at all.
      await ws.step("at-limit", () => {
        writeFileSync(join(ws.dir, "b.bin"), fill("b", 900));
        writeFileSync(join(ws.dir, "b-copy.bin"), fill("b", 900));
        writeFileSync(join(ws.dir, "c.bin"), fill("c", 900));
        writeFileSync(join(ws.dir, "d.bin"), fill("d", 700));
        writeFileSync(join(ws.dir, "a-copy.bin"), fill("a", 900));
      });
      const atLimit = ws.checkpoint;
      const before = await ctx.step("before", () => treeOf(ws.dir));
      let caught: unknown;
      let atCatch: unknown;
      try {
        await ws.step(
          "too-much",
          () => {
            attempts++;
            writeFileSync(join(ws.dir, "README.md"), "# rewritten\n");
            rmSync(join(ws.dir, "src/b.ts"));
            for (const [i, content] of tooMuch.entries()) {
              writeFileSync(join(ws.dir, `new-${i}.bin`), content);
            }
            return "done";
          },
          { retry: { maxAttempts: 3, initialDelay: 0, jitter: false } },
        );
      } catch (err) {
        caught = err;
        atCatch = treeOf(ws.dir); // before any other call: the failed step's own rollback
      }
      const afterFailure = await ctx.step("after-failure", () => treeOf(ws.dir));
      const checkpointAfterFailure = ws.checkpoint;
      const next = await ws.step("next", () => treeOf(ws.dir));
      return {
        isWorkspaceError: caught instanceof WorkspaceError,
        message: (caught as Error | undefined)?.message,
        atLimit,
        checkpointAfterFailure,
        before,
        atCatch,
        afterFailure,
        next,
      };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    const out = await advanceUntil(h.clock, run.result(), 1_000);
    expect(out.isWorkspaceError).toBe(true);
    expect(out.message).toMatch(
      /^Workspace "repo", step "too-much": at least \d+ bytes of new content, over the limit of 2500 bytes per checkpoint \(maxCheckpointBytes\); largest new files: "new-\d+\.bin" \(\d+ bytes\).*; ignore build outputs and large files, or raise the limit$/,
    );
    expect(attempts).toBe(1); // a WorkspaceError is not retried
    // The limit counts new content: exactly 2500 bytes passed.
    expect((await recordedCheckpoint(h, run.id, "at-limit")).changes).toEqual({
      added: 5,
      modified: 0,
      deleted: 0,
    });
    // Rolled back to the last checkpoint: the rewrite, the deletion and the new files undone.
    expect(out.atCatch).toEqual(out.before);
    expect(out.afterFailure).toEqual(out.before);
    expect(out.next).toEqual(out.before);
    expect(treeOf(a)).toEqual(out.before);
    expect(out.checkpointAfterFailure).toBe(out.atLimit);
    const next = await recordedCheckpoint(h, run.id, "next");
    expect(next.checkpoint).toBe(out.atLimit);
    expect(next.changes).toEqual({ added: 0, modified: 0, deleted: 0 });
    // Nothing of the failed step is recorded: an error outcome, no checkpoint, no content.
    const store = h.store();
    await store.open({ clock: h.clock });
    try {
      const rec = (await store.loadJournal(run.id)).steps.find((s) => s.key === "too-much");
      expect(rec).toMatchObject({ outcome: "error", result: null, attempt: 1 });
      expect(rec?.error?.message).toBe(out.message);
      const hashes = tooMuch.map((c) => hashObject("blob", c));
      expect(await store.missingWorkspaceObjects(hashes)).toEqual(hashes);
    } finally {
      await store.close();
    }
    const [view] = await e.listWorkspaces(run.id);
    expect(view?.checkpoints.map((c) => c.step)).toEqual([
      "workspace:repo",
      "fits",
      "at-limit",
      "next",
    ]);
    expect(view?.checkpoints.find((c) => c.step === "at-limit")?.bytes).toBe(2500);
  });

  it("the maxCheckpointBytes error names the step that went over and the size of its new content", async () => {
    // A run with many workspace steps must be able to tell which one went over, by how much,
    // and with which files.
    const h = harness();
    const a = temp();
    const wf = workflow({ name: "ws-checkpoint-limit-message", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir: a, maxCheckpointBytes: 1000 });
      try {
        await ws.step("generate-assets", () => {
          writeFileSync(join(ws.dir, "one.bin"), Buffer.alloc(600, 1));
          writeFileSync(join(ws.dir, "two.bin"), Buffer.alloc(600, 2));
        });
      } catch (err) {
        return (err as Error).message;
      }
      return "no error";
    });
    const e = h.engine([wf]);
    const message = await (await e.start(wf, undefined)).result();
    expect(message).toBe(
      'Workspace "repo", step "generate-assets": at least 1200 bytes of new content, over the limit of 1000 bytes per checkpoint (maxCheckpointBytes); largest new files: "one.bin" (600 bytes), "two.bin" (600 bytes); ignore build outputs and large files, or raise the limit',
    );
  });

  it("gitignore: false checkpoints and restores what .gitignore files list; ignore and the defaults still apply", async () => {
    const h = harness();
    const a = temp();
    const b = join(temp(), "elsewhere");
    seedRepo(a);
    writeFileSync(join(a, ".gitignore"), "*.log\n");
    writeFileSync(join(a, "src/.gitignore"), "gen.ts\n");
    let dir = a;
    let hang = true;
    let lookStarted = false;
    let caught = "";
    const wf = workflow({ name: "ws-no-gitignore", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir, gitignore: false, ignore: ["tmp/"] });
      await ws.step("write", () => {
        writeFileSync(join(ws.dir, "build.log"), "log v1\n");
        writeFileSync(join(ws.dir, "src/gen.ts"), "gen v1\n");
        mkdirSync(join(ws.dir, "tmp"));
        writeFileSync(join(ws.dir, "tmp/scratch"), "scratch v1\n");
        mkdirSync(join(ws.dir, "node_modules/x"), { recursive: true });
        writeFileSync(join(ws.dir, "node_modules/x/i.js"), "dep v1\n");
      });
      try {
        await ws.step(
          "break",
          () => {
            writeFileSync(join(ws.dir, "build.log"), "log v2\n");
            rmSync(join(ws.dir, "src/gen.ts"));
            writeFileSync(join(ws.dir, "tmp/scratch"), "scratch v2\n");
            writeFileSync(join(ws.dir, "node_modules/x/i.js"), "dep v2\n");
            throw new Error("broken");
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch (err) {
        caught = (err as Error).message;
      }
      const afterRollback = await ctx.step("after-rollback", () => treeOf(ws.dir));
      await ctx.step("look", async () => {
        if (hang) {
          lookStarted = true;
          await new Promise(() => {}); // the first worker dies here
        }
      });
      const restored = await ws.step("check", () => treeOf(ws.dir));
      return { afterRollback, restored };
    });
    const first = crashableEngine(h, [wf]);
    const run = await first.engine.start(wf, undefined);
    let ended: unknown;
    run.result().then(
      (value) => (ended = { value }),
      (err: Error) => (ended = { error: err.message }),
    );
    await until(() => lookStarted || ended !== undefined, "break fails and look runs");
    expect(ended).toBeUndefined(); // the run must not end (a failed rollback fails it)
    expect(caught).toBe("broken"); // the body ran, and failed
    const atLook = treeOf(a);
    first.crash();
    dir = b;
    hang = false;
    // What .gitignore lists is part of the checkpoint; tmp/ and node_modules are not.
    const write = await recordedCheckpoint(h, run.id, "write");
    expect(write.changes).toEqual({ added: 2, modified: 0, deleted: 0 });
    const e2 = h.engine([wf]);
    const paths = (await e2.readCheckpoint(run.id, write.checkpoint)).map((p) => p.path);
    expect(paths).toEqual(expect.arrayContaining(["build.log", "src/gen.ts", "src/.gitignore"]));
    expect(paths.filter((p) => p.startsWith("tmp") || p.startsWith("node_modules"))).toEqual([]);
    // The failed step is rolled back over listed files; ignored ones are left as it made them.
    expect(readFileSync(join(a, "build.log"), "utf8")).toBe("log v1\n");
    expect(readFileSync(join(a, "src/gen.ts"), "utf8")).toBe("gen v1\n");
    expect(readFileSync(join(a, "tmp/scratch"), "utf8")).toBe("scratch v2\n");
    expect(readFileSync(join(a, "node_modules/x/i.js"), "utf8")).toBe("dep v2\n");

    // A resume in an empty directory elsewhere restores the listed files, not the ignored.
    await h.clock.advance(60_000);
    const out = (await advanceUntil(h.clock, e2.handle(run.id).result(), 30_000)) as {
      afterRollback: unknown;
      restored: Record<string, unknown>;
    };
    expect(out.afterRollback).toEqual(atLook);
    expect(treeOf(b)).toEqual(treeOf(a, ["tmp", "node_modules"]));
    expect(out.restored).toEqual(treeOf(b));
    expect(out.restored["build.log"]).toBeDefined();
    expect(out.restored["src/gen.ts"]).toBeDefined();
    expect(Object.keys(out.restored).filter((p) => /^(tmp|node_modules)/.test(p))).toEqual([]);
  });

  it("defaultIgnore: false checkpoints and restores node_modules and .git; .gitignore and ignore still apply", async () => {
    const h = harness();
    const a = temp();
    seedRepo(a);
    writeFileSync(join(a, ".gitignore"), "*.log\n");
    let caught = "";
    const wf = workflow({ name: "ws-no-default-ignore", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir: a, defaultIgnore: false, ignore: ["tmp/"] });
      await ws.step("write", () => {
        mkdirSync(join(ws.dir, "node_modules/x"), { recursive: true });
        writeFileSync(join(ws.dir, "node_modules/x/i.js"), "dep v1\n");
        mkdirSync(join(ws.dir, "src/.git"), { recursive: true });
        writeFileSync(join(ws.dir, "src/.git/HEAD"), "ref: v1\n");
        writeFileSync(join(ws.dir, "build.log"), "log v1\n");
        mkdirSync(join(ws.dir, "tmp"));
        writeFileSync(join(ws.dir, "tmp/scratch"), "scratch v1\n");
      });
      try {
        await ws.step(
          "break",
          () => {
            writeFileSync(join(ws.dir, "node_modules/x/i.js"), "dep v2\n");
            rmSync(join(ws.dir, "src/.git"), { recursive: true });
            writeFileSync(join(ws.dir, "build.log"), "log v2\n");
            writeFileSync(join(ws.dir, "tmp/scratch"), "scratch v2\n");
            throw new Error("broken");
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch (err) {
        caught = (err as Error).message;
      }
      return ws.checkpoint;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    const checkpoint = await run.result();
    expect(caught).toBe("broken"); // the body ran, and failed
    const write = await recordedCheckpoint(h, run.id, "write");
    expect(write.checkpoint).toBe(checkpoint);
    expect(write.changes).toEqual({ added: 2, modified: 0, deleted: 0 });
    const paths = (await e.readCheckpoint(run.id, checkpoint)).map((p) => p.path);
    expect(paths).toEqual(expect.arrayContaining(["node_modules/x/i.js", "src/.git/HEAD"]));
    expect(paths.filter((p) => p.endsWith(".log") || p.startsWith("tmp"))).toEqual([]);
    // The rollback restored node_modules and .git; it left the ignored files alone.
    expect(readFileSync(join(a, "node_modules/x/i.js"), "utf8")).toBe("dep v1\n");
    expect(readFileSync(join(a, "src/.git/HEAD"), "utf8")).toBe("ref: v1\n");
    expect(readFileSync(join(a, "build.log"), "utf8")).toBe("log v2\n");
    expect(readFileSync(join(a, "tmp/scratch"), "utf8")).toBe("scratch v2\n");
  });

  it("content is stored once across runs and steps, before the step's record, and pruned with its last run", async () => {
    const h = harness();
    const stored: WorkspaceObject[] = [];
    let checkedBeforeRecord = 0;
    const inner = h.store();
    const store = faultyStore(inner, {
      beforeAppend: async (writes) => {
        for (const w of writes) {
          for (const s of w.steps ?? []) {
            const v = s.result ? decode<Partial<StepResult>>(s.result) : undefined;
            if (!v?.checkpoint) continue;
            // The checkpoint a record names is already stored when the record is written.
            expect(await inner.missingWorkspaceObjects([v.checkpoint])).toEqual([]);
            checkedBeforeRecord++;
          }
        }
      },
    });
    const counting = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === "putWorkspaceObjects") {
          return (p: Parameters<Store["putWorkspaceObjects"]>[0]) => {
            stored.push(...p.objects);
            return target.putWorkspaceObjects(p);
          };
        }
        return Reflect.get(target, prop, receiver);
      },
    });
    const dirs2 = [temp(), temp()];
    for (const d of dirs2) {
      seedRepo(d);
      writeFileSync(join(d, "big.txt"), "lorem ipsum ".repeat(10_000));
    }
    const wf = workflow(
      { name: "ws-dedupe", version: "1" },
      async (ctx, input: { dir: string }) => {
        const ws = await ctx.workspace("repo", { dir: input.dir });
        await ws.step("nothing", () => "no change");
        await ws.step("one", () => writeFileSync(join(ws.dir, "src/a.ts"), "changed\n"));
        return ws.checkpoint;
      },
    );
    const e = h.engine([wf as AnyWorkflow], { store: counting });
    const r1 = await e.start(wf, { dir: dirs2[0]! });
    const cp1 = await r1.result();
    const afterFirst = stored.length;
    const bytesFirst = stored.reduce((n, o) => n + o.data.byteLength, 0);
    // big.txt compresses: stored bytes are well under its size.
    expect(bytesFirst).toBeLessThan(120_000 / 4);
    const r2 = await e.start(wf, { dir: dirs2[1]! });
    const cp2 = await r2.result();
    expect(cp2).toBe(cp1);
    expect(stored.length).toBe(afterFirst); // the second run stored nothing new
    expect(checkedBeforeRecord).toBe(6);
    const nothing = await recordedCheckpoint(h, r1.id, "nothing");
    expect(nothing.changes).toEqual({ added: 0, modified: 0, deleted: 0 });

    const client = h.store();
    await client.open({ clock: h.clock });
    try {
      const holds = await holdsOf(client, cp1);
      const base = (await recordedCheckpoint(h, r1.id, "workspace:repo")).checkpoint;
      const baseHolds = await holdsOf(client, base);
      const all = [...new Set([...holds, ...baseHolds])];
      expect(await client.deleteRun(r1.id)).toEqual({ deleted: true, objects: 0, bytes: 0 });
      expect(await client.missingWorkspaceObjects(all)).toEqual([]);
      const gone = await client.deleteRun(r2.id);
      expect(gone).toMatchObject({ deleted: true, objects: all.length });
      expect(await client.missingWorkspaceObjects(all)).toEqual(all);
    } finally {
      await client.close();
    }
  });

  it("changes made outside workspace steps are reverted before the next workspace step", async () => {
    const h = harness();
    const a = temp();
    seedRepo(a);
    const logs: string[] = [];
    const wf = workflow({ name: "ws-outside", version: "1" }, async (ctx) => {
      const ws: Workspace = await ctx.workspace("repo", { dir: a });
      await ws.step("edit", () => writeFileSync(join(ws.dir, "src/a.ts"), "edited\n"));
      await ctx.step("sneaky", () => writeFileSync(join(ws.dir, "src/a.ts"), "sneaky\n"));
      return ws.step("read", () => readFileSync(join(ws.dir, "src/a.ts"), "utf8"));
    });
    const e = h.engine([wf], { log: (m) => logs.push(m) });
    const run = await e.start(wf, undefined);
    expect(await run.result()).toBe("edited\n");
    expect(logs.some((m) => m.includes("changed outside a workspace step were reverted"))).toBe(
      true,
    );
  });
});

process.on("exit", () => {
  for (const c of dirs) c();
});
