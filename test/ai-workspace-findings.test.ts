// Found by an adversarial audit of the agent layer (cairn/ai) and ctx.workspace, each a
// regression test of a bug it found. Each test states the contract it holds the code to
// (README / docs/API.md): a replay that diverges fails the run even when the SDK or the
// workflow catches the error; what the SDK makes up (response id, timestamp) is recorded;
// a caller's abort is final; restores keep ignored content and stay inside their run's
// directory.

import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { generateText, streamText } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { afterEach, describe, expect, it } from "vitest";
import { FatalError, NonDeterminismError, workflow } from "../src/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { advanceUntil, useHarness } from "./helpers/engines.js";
import { tempDir } from "./helpers/sqlite.js";

const dirs: Array<() => void> = [];
afterEach(() => {
  for (const d of dirs.splice(0)) d();
});
function temp(): string {
  const t = tempDir("cairn-findings-");
  dirs.push(t.cleanup);
  return t.dir;
}

type Part =
  Awaited<ReturnType<MockLanguageModelV4["doStream"]>>["stream"] extends ReadableStream<infer P>
    ? P
    : never;

/** A model that answers every call with `text` (generate or stream), counting calls. */
function fixedModel(text: string, withMetadata = true) {
  const calls = { n: 0 };
  const model = new MockLanguageModelV4({
    doGenerate: async () => {
      calls.n++;
      return {
        content: [{ type: "text", text }],
        finishReason: { unified: "stop", raw: "stop" },
        usage: USAGE,
        warnings: [],
      };
    },
    doStream: async () => {
      calls.n++;
      const parts: Part[] = [{ type: "stream-start", warnings: [] }];
      if (withMetadata) {
        parts.push({
          type: "response-metadata",
          id: "resp_1",
          timestamp: new Date(0),
          modelId: "m",
        });
      }
      parts.push(
        { type: "text-start", id: "t" },
        { type: "text-delta", id: "t", delta: text },
        { type: "text-end", id: "t" },
        { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
      );
      return {
        stream: new ReadableStream<Part>({
          start(c) {
            for (const p of parts) c.enqueue(p);
            c.close();
          },
        }),
      };
    },
  });
  return { model, calls };
}

describe("cairn/ai: replays that diverge (sqlite)", () => {
  const harness = useHarness("sqlite");

  // API.md, ai.model: "a different digest ... fails the run with NonDeterminismError".
  // The error is thrown into the SDK, which turns a doStream failure into an error part:
  // a workflow reading textStream completes, on replay, with other data than the first run.
  it("streamText: a replay whose prompt changed fails the run instead of completing with an empty text", async () => {
    const h = harness();
    const ai = kitFor(h);
    const { model, calls } = fixedModel("the first answer");
    const make = (version: string, system: string) =>
      workflow({ name: "stream-drift", version }, async (ctx) => {
        const r = streamText({
          model: ai.model(ctx, model),
          system,
          prompt: "hi",
          onError: () => {},
        });
        let text = "";
        for await (const t of r.textStream) text += t;
        await ctx.step("after", () => 1);
        return text;
      });
    const v1 = make("1", "You are careful.");
    const v2 = make("2", "You are terse.");
    const engine = h.engine([v1, v2]);
    const run = await engine.start(v1, null);
    expect(await run.result()).toBe("the first answer");
    const fork = await engine.fork(run.id, { fromStep: "after", version: "2" });
    const outcome = await fork.result().then(
      (v) => ({ completed: v }),
      (e: unknown) => ({ failed: e }),
    );
    expect(calls.n).toBe(1); // the provider was not called again either way
    expect(outcome).toEqual({ failed: expect.any(NonDeterminismError) });
  });

  it("generateText: a replay whose prompt changed fails the run even when the workflow catches model errors", async () => {
    const h = harness();
    const ai = kitFor(h);
    const { model } = fixedModel("the first answer");
    const make = (version: string, system: string) =>
      workflow({ name: "caught-drift", version }, async (ctx) => {
        let text: string;
        try {
          text = (await generateText({ model: ai.model(ctx, model), system, prompt: "hi" })).text;
        } catch {
          text = "the model failed";
        }
        await ctx.step("after", () => 1);
        return text;
      });
    const v1 = make("1", "You are careful.");
    const v2 = make("2", "You are terse.");
    const engine = h.engine([v1, v2]);
    const run = await engine.start(v1, null);
    expect(await run.result()).toBe("the first answer");
    const fork = await engine.fork(run.id, { fromStep: "after", version: "2" });
    const outcome = await fork.result().then(
      (v) => ({ completed: v }),
      (e: unknown) => ({ failed: e }),
    );
    expect(outcome).toEqual({ failed: expect.any(NonDeterminismError) });
  });

  // A provider whose stream sends no response-metadata part (or a doGenerate without
  // `response`): the SDK fills response.id and timestamp with a fresh id and the current
  // time on every execution, so a replay hands the workflow other values than the first
  // execution had (and than any step recorded with them).
  it("streamText: response id and timestamp are the same on replay when the provider sends none", async () => {
    const h = harness();
    const ai = kitFor(h);
    const { model } = fixedModel("answer", false);
    const wf = workflow({ name: "stream-ids", version: "1" }, async (ctx) => {
      const r = streamText({ model: ai.model(ctx, model), prompt: "hi" });
      const res = await r.response;
      await ctx.step("after", () => 1);
      return { id: res.id, timestamp: res.timestamp.toISOString() };
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const first = await run.result();
    await new Promise((r) => setTimeout(r, 5));
    const fork = await engine.fork(run.id, { fromStep: "after" });
    expect(await fork.result()).toEqual(first);
  });
});

describe("cairn/ai response metadata (sqlite)", () => {
  const harness = useHarness("sqlite");

  it("generateText: response id and timestamp are the same on replay when the provider sends none", async () => {
    const h = harness();
    const ai = kitFor(h);
    const { model } = fixedModel("answer");
    const wf = workflow({ name: "gen-ids", version: "1" }, async (ctx) => {
      const r = await generateText({ model: ai.model(ctx, model), prompt: "hi" });
      await ctx.step("after", () => 1);
      return { id: r.response.id, timestamp: r.response.timestamp.toISOString() };
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const first = await run.result();
    await new Promise((r) => setTimeout(r, 5));
    const fork = await engine.fork(run.id, { fromStep: "after" });
    expect(await fork.result()).toEqual(first);
  });
});

describe("cairn/ai abort (sqlite)", () => {
  const harness = useHarness("sqlite");

  // The SDK's abortSignal is the caller giving up: the call is not to be made again. It is
  // retried as any failure, calling the provider again (twice, by default) with a signal
  // already aborted, each after a backoff: the caller's abort comes seconds late.
  it("a call the caller aborts (generateText's abortSignal) fails at once, without retries", async () => {
    const h = harness();
    const ai = kitFor(h);
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: (o) => {
        calls++;
        return new Promise((_, reject) => {
          const signal = o.abortSignal;
          if (signal?.aborted) reject(signal.reason);
          signal?.addEventListener("abort", () => reject(signal.reason));
        });
      },
    });
    const ac = new AbortController();
    let started = false;
    const wf = workflow({ name: "caller-abort", version: "1" }, async (ctx) => {
      started = true;
      try {
        await generateText({ model: ai.model(ctx, model), prompt: "hi", abortSignal: ac.signal });
        return "done";
      } catch (e) {
        return `caught ${(e as Error).name}`;
      }
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    while (!started || calls === 0) await new Promise((r) => setTimeout(r, 5));
    ac.abort();
    // The backoffs (if any) run on the virtual clock.
    const out = await advanceUntil(h.clock, run.result(), 500);
    expect(out).toBe("caught AbortError");
    expect(calls).toBe(1);
    const [step] = await engine.getSteps(run.id);
    expect(step?.attempts.length).toBe(1);
  });
});

describe("workspace restores (sqlite)", () => {
  const harness = useHarness("sqlite");

  // README: "Ignored paths are neither stored nor touched by a restore." The scan reads a
  // directory's .gitignore from disk even when that file is itself ignored, but a restore
  // only knows the .gitignore files the checkpoint holds: the next step's restore deletes
  // every path the ignored .gitignore ignored.
  it('a directory whose own .gitignore ignores everything ("*", as pytest/mypy/venv write) keeps its ignored content across steps', async () => {
    const h = harness();
    const dir = temp();
    const wf = workflow({ name: "ws-self-ignore", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      await ws.step("make-cache", () => {
        mkdirSync(join(ws.dir, ".cache"));
        writeFileSync(join(ws.dir, ".cache/.gitignore"), "*\n");
        writeFileSync(join(ws.dir, ".cache/data"), "expensive\n");
        writeFileSync(join(ws.dir, "main.txt"), "main\n");
      });
      return ws.step("use-cache", () => ({
        data: existsSync(join(ws.dir, ".cache/data"))
          ? readFileSync(join(ws.dir, ".cache/data"), "utf8")
          : null,
        gitignore: existsSync(join(ws.dir, ".cache/.gitignore")),
      }));
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    expect(await run.result()).toEqual({ data: "expensive\n", gitignore: true });
  });

  // The same mismatch with a .gitignore that is a symlink: the scan follows it, a restore
  // (which only reads regular .gitignore files of the checkpoint) does not.
  it("a symlinked .gitignore: what it ignores is not deleted by the next step's restore", async () => {
    const h = harness();
    const dir = temp();
    const wf = workflow({ name: "ws-link-ignore", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      await ws.step("setup", () => {
        mkdirSync(join(ws.dir, "config"));
        writeFileSync(join(ws.dir, "config/ignore"), ".env\n");
        symlinkSync("config/ignore", join(ws.dir, ".gitignore"));
        writeFileSync(join(ws.dir, ".env"), "TOKEN=secret\n");
      });
      return ws.step("read-env", () =>
        existsSync(join(ws.dir, ".env")) ? readFileSync(join(ws.dir, ".env"), "utf8") : null,
      );
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    expect(await run.result()).toBe("TOKEN=secret\n");
  });

  // A restore walks the directory with the checkpoint's ignore rules and never sees an
  // ignored entry; a "build/" rule ignores a directory but not the file the checkpoint holds
  // at that path. A failed step that turned the file into a directory cannot be rolled
  // back (EEXIST), and every later restore fails the run with a WorkspaceError that a
  // resume cannot cure (the directory is still in the way).
  it("a failed step that turned a file into an ignored directory is rolled back", async () => {
    const h = harness();
    const dir = temp();
    const wf = workflow({ name: "ws-dir-only", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      await ws.step("setup", () => {
        writeFileSync(join(ws.dir, ".gitignore"), "build/\n");
        writeFileSync(join(ws.dir, "build"), "a file named build\n");
      });
      try {
        await ws.step("make", () => {
          rmSync(join(ws.dir, "build"));
          mkdirSync(join(ws.dir, "build"));
          writeFileSync(join(ws.dir, "build/out.o"), "obj");
          throw new FatalError("compile error");
        });
      } catch {
        // the model (or the workflow) takes the failure and goes on
      }
      return ws.step("look", () => readFileSync(join(ws.dir, "build"), "utf8"));
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    expect(await run.result()).toBe("a file named build\n");
  });

  // A workspace without `dir` lives at <workspaceRoot>/<encoded run id>/<name>; run ids
  // "." and ".." are valid, and encodeURIComponent leaves them as they are: the directory
  // of run "." is <root>/<name>, the parent of run "<name>"'s workspaces, so its checkpoint
  // takes in (and its restores delete) another run's files.
  it('run ids "." and ".." keep their default workspace inside workspaceRoot, apart from other runs', async () => {
    const h = harness();
    const root = join(temp(), "workspaces");
    const seen: Record<string, string> = {};
    const wf = workflow({ name: "ws-dot-ids", version: "1" }, async (ctx, write: boolean) => {
      const ws = await ctx.workspace("repo");
      seen[ctx.runId] = ws.dir;
      if (write) await ws.step("write", () => writeFileSync(join(ws.dir, "secret.txt"), "mine\n"));
      return ws.checkpoint;
    });
    const engine = h.engine([wf], { workspaceRoot: root });
    const other = await engine.start(wf, true, { id: "repo" });
    await other.result();
    const dot = await engine.start(wf, false, { id: "." });
    const dotCheckpoint = (await dot.result()) as string;
    const dotdot = await engine.start(wf, false, { id: ".." });
    await dotdot.result();
    for (const id of [".", ".."]) {
      expect(seen[id]!.startsWith(`${root}/`), `${id}: ${seen[id]}`).toBe(true);
      expect(seen.repo!.startsWith(`${seen[id]}/`), `${id}: ${seen[id]}`).toBe(false);
    }
    // Run "." must not hold run "repo"'s file.
    const entries = await engine.readCheckpoint(".", dotCheckpoint);
    expect(entries.map((e) => e.path)).toEqual([]);
  });
});

describe("workspace divergence (sqlite)", () => {
  const harness = useHarness("sqlite");

  // The same for a workspace step replayed over a plain step's record: the divergence
  // must fail the run even when the workflow catches the step's errors.
  it("a ws.step replayed over a plain step's record fails the run even when the workflow catches it", async () => {
    const h = harness();
    const dir = temp();
    const v1 = workflow({ name: "ws-drift", version: "1" }, async (ctx) => {
      await ctx.workspace("repo", { dir });
      const v = await ctx.step("edit", () => "plain");
      await ctx.step("after", () => 1);
      return v;
    });
    const v2 = workflow({ name: "ws-drift", version: "2" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      let v: string;
      try {
        v = await ws.step("edit", () => "workspace");
      } catch {
        v = "caught";
      }
      await ctx.step("after", () => 1);
      return v;
    });
    const engine = h.engine([v1, v2]);
    const run = await engine.start(v1, null);
    expect(await run.result()).toBe("plain");
    const fork = await engine.fork(run.id, { fromStep: "after", version: "2" });
    const outcome = await fork.result().then(
      (v) => ({ completed: v }),
      (e: unknown) => ({ failed: e }),
    );
    expect(outcome).toEqual({ failed: expect.any(NonDeterminismError) });
  });
});
