// cairn/ai with a workspace: ai.tools(ctx, tools, { workspace }) runs each tool call as a
// step of the workspace, so a tool's edit is checkpointed with its record and is back in
// the directory when a later call executes somewhere else. Without it, a resume in
// another directory would replay "edited" and then work on a directory without the edit.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { type Ai, effectTool } from "../src/ai/index.js";
import { type Workspace, workflow } from "../src/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

type Prompt = Parameters<MockLanguageModelV4["doGenerate"]>[0]["prompt"];

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function tempRoot(): string {
  const d = mkdtempSync(join(tmpdir(), "cairn-ai-ws-"));
  dirs.push(d);
  return d;
}

/** The last tool result the model was sent, as text. */
function lastToolResult(prompt: Prompt): string | undefined {
  let out: string | undefined;
  for (const m of prompt) {
    if (m.role !== "tool") continue;
    for (const p of m.content) {
      if (p.type === "tool-result" && (p.output.type === "text" || p.output.type === "json")) {
        out = typeof p.output.value === "string" ? p.output.value : JSON.stringify(p.output.value);
      }
    }
  }
  return out;
}

/** Turn 1 edits notes.txt, turn 2 reads it back and notes the change, turn 3 answers with
 *  what the read returned. */
function scriptedModel(reads: string[]): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      const turn = prompt.filter((m) => m.role === "assistant").length;
      const call = (toolName: string, input: unknown) => ({
        type: "tool-call" as const,
        toolCallId: `call_${turn}`,
        toolName,
        input: JSON.stringify(input),
      });
      const last = lastToolResult(prompt);
      if (turn === 2 && last !== undefined) reads.push(last);
      const content =
        turn === 0
          ? [call("editFile", { path: "notes.txt", text: "edited by the agent\n" })]
          : turn === 1
            ? [call("readFile", { path: "notes.txt" })]
            : [{ type: "text" as const, text: `read: ${last}` }];
      const finish = turn < 2 ? "tool-calls" : "stop";
      return {
        content,
        finishReason: { unified: finish, raw: finish },
        usage: USAGE,
        warnings: [],
      };
    },
  });
}

function editorWorkflow(ai: Ai, model: MockLanguageModelV4, opened: string[]) {
  return workflow({ name: "editor", version: "1" }, async (ctx, _input: null) => {
    const ws = await ctx.workspace("repo");
    const tools = {
      editFile: tool({
        inputSchema: z.object({ path: z.string(), text: z.string() }),
        execute: async ({ path, text }) => {
          writeFileSync(join(ws.dir, path), text);
          return "ok";
        },
      }),
      readFile: tool({
        inputSchema: z.object({ path: z.string() }),
        execute: async ({ path }) => {
          try {
            return readFileSync(join(ws.dir, path), "utf8");
          } catch {
            return `no such file: ${path}`;
          }
        },
      }),
      openPullRequest: effectTool({
        inputSchema: z.object({ title: z.string() }),
        perform: ({ title }) => {
          opened.push(title);
          return `opened ${title}`;
        },
        reconcile: () => undefined,
      }),
    };
    const r = await generateText({
      model: ai.model(ctx, model),
      tools: ai.tools(ctx, tools, { workspace: ws }),
      stopWhen: stepCountIs(5),
      prompt: "Edit notes.txt, then read it.",
    });
    return { text: r.text, checkpoint: ws.checkpoint };
  });
}

describe.each(BACKENDS)("ai.tools with a workspace (%s)", (backend) => {
  const harness = useHarness(backend);

  it("a tool call is a workspace step: its edit is checkpointed with its record", async () => {
    const h = harness();
    const reads: string[] = [];
    const wf = editorWorkflow(kitFor(h), scriptedModel(reads), []);
    const engine = h.engine([wf], { workspaceRoot: tempRoot() });
    const run = await engine.start(wf, null);
    const out = await run.result();
    expect(out.text).toBe("read: edited by the agent\n");

    const steps = await engine.getSteps(run.id);
    const edit = steps.find((s) => s.key === "tool:editFile:call_0");
    const read = steps.find((s) => s.key === "tool:readFile:call_1");
    expect(edit?.result).toMatchObject({
      changes: { added: 1, modified: 0, deleted: 0 },
      value: "ok",
    });
    const editCheckpoint = (edit?.result as { checkpoint?: string } | undefined)?.checkpoint;
    expect(editCheckpoint).toMatch(/^[0-9a-f]{40,}$/);
    // A read changes nothing: same checkpoint; the run ends on it.
    expect(read?.result).toMatchObject({
      checkpoint: editCheckpoint,
      changes: { added: 0, modified: 0, deleted: 0 },
    });
    expect(out.checkpoint).toBe(editCheckpoint);
  });

  it("a call executed in another, empty directory finds the edits of the recorded calls", async () => {
    const h = harness();
    const reads: string[] = [];
    const model = scriptedModel(reads);
    const ai = kitFor(h);
    const wf = editorWorkflow(ai, model, []);
    const first = h.engine([wf], { workspaceRoot: tempRoot() });
    const run = await first.start(wf, null);
    await run.result();
    await first.close();

    // Another machine: an engine whose workspaces live elsewhere. The fork replays the
    // model calls and the edit (not executed again) and executes the read there.
    const elsewhere = tempRoot();
    const second = h.engine([wf], { workspaceRoot: elsewhere });
    const forked = await second.fork(run.id, { fromStep: "tool:readFile:call_1" });
    const fork = second.handle(wf, forked.id);
    expect((await fork.result()).text).toBe("read: edited by the agent\n");
    expect(reads).toEqual(["edited by the agent\n", "edited by the agent\n"]);
    const forkDir = join(elsewhere, encodeURIComponent(fork.id), "repo");
    expect(readFileSync(join(forkDir, "notes.txt"), "utf8")).toBe("edited by the agent\n");
  });

  it("a workspace that is not one is refused when the tools are made, naming the run", async () => {
    const h = harness();
    const wf = workflow({ name: "bad-ws", version: "1" }, async (ctx, _input: null) => {
      const ai = kitFor(h);
      // e.g. the workspace's name instead of the workspace
      ai.tools(ctx, {}, { workspace: "repo" as unknown as Workspace });
      return "unreachable";
    });
    const engine = h.engine([wf], { workspaceRoot: tempRoot() });
    const run = await engine.start(wf, null, { id: "bad-ws-1" });
    await expect(run.result()).rejects.toThrow(
      /ai\.tools\(\) in run "bad-ws-1": `workspace` must be a workspace the run opened \(await ctx\.workspace\(name\)\), not string/,
    );
  });

  it("an effect tool stays an effect (ctx.effect) when the tools are given a workspace", async () => {
    const h = harness();
    const opened: string[] = [];
    const model = new MockLanguageModelV4({
      doGenerate: async ({ prompt }) => {
        const turn = prompt.filter((m) => m.role === "assistant").length;
        const content =
          turn === 0
            ? [
                {
                  type: "tool-call" as const,
                  toolCallId: "call_pr",
                  toolName: "openPullRequest",
                  input: JSON.stringify({ title: "Fix" }),
                },
              ]
            : [{ type: "text" as const, text: "done" }];
        const finish = turn === 0 ? "tool-calls" : "stop";
        return {
          content,
          finishReason: { unified: finish, raw: finish },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const wf = editorWorkflow(kitFor(h), model, opened);
    const engine = h.engine([wf], { workspaceRoot: tempRoot() });
    const run = await engine.start(wf, null);
    await run.result();
    const pr = (await engine.getSteps(run.id)).find(
      (s) => s.key === "tool:openPullRequest:call_pr",
    );
    expect(pr?.kind).toBe("effect");
    expect(pr?.result).toBe("opened Fix");
    expect(opened).toEqual(["Fix"]);
  });
});
