// The demo's language model: the AI SDK's MockLanguageModelV4 (from `ai/test`) with a
// script. Like a real model it answers from the conversation alone: each turn reads the
// tool results it was sent and decides. It checks them, too: if the tests do not show its
// last edit (say, a resume ran them on a checkout without it), it stops and says so, and
// the demo fails. Usage is derived from the sizes of the prompt and the answer, so every
// run of the demo spends the same tokens.

import { MockLanguageModelV4 } from "ai/test";
import type { Reporter } from "./ledger.js";
import type { TestReport } from "./repo.js";

export const MODEL = { provider: "scripted", modelId: "coder-1" };
/** Dollars per million tokens: about what a mid-size hosted model costs. */
export const PRICES = { "scripted:coder-1": { input: 3, output: 15 } };

type Prompt = Parameters<MockLanguageModelV4["doGenerate"]>[0]["prompt"];
type Result = Awaited<ReturnType<MockLanguageModelV4["doGenerate"]>>;
type Content = Result["content"];

interface ToolCall {
  tool: string;
  input: Record<string, unknown>;
}
interface Answer {
  text: string;
  calls: ToolCall[];
  /** The gist of `text`, for the demo's log. */
  gist?: string;
}

const SOURCE = "src/slugify.mjs";
const EDIT_1 = { find: "/[^a-z0-9]/g", replace: "/[^a-z0-9]+/g" };
const EDIT_2 = { find: '"-");', replace: '"-").replace(/^-|-$/g, "");' };
export const PR_TITLE = "Fix #42: slugify collapses and trims separators";

/** What the model says at turn `turn` (0-based), given the tool results it was sent. */
function answer(turn: number, all: Map<string, unknown[]>): Answer {
  const results = new Map([...all].map(([tool, values]) => [tool, values.at(-1)]));
  const stop = (why: string): Answer => ({ text: `I am stopping: ${why}`, calls: [] });
  const tests = results.get("run_tests") as TestReport | undefined;
  const summary = (t: TestReport | undefined) =>
    t ? `${t.passed} passed, ${t.failed} failed ${JSON.stringify(t.failures)}` : "no report";
  switch (turn) {
    case 0:
      return {
        text: "Plan: read slugify and its tests; fix the regular expression; run the tests until they pass; commit on a branch; open a pull request.",
        gist: "plan: read, fix, test until green, commit, open a PR",
        calls: [
          { tool: "read_file", input: { path: SOURCE } },
          { tool: "read_file", input: { path: "test/slugify.test.mjs" } },
        ],
      };
    case 1: {
      const read = all.get("read_file") ?? [];
      if (!read.some((r) => String(r).includes(EDIT_1.find))) {
        return stop(`${SOURCE} is not the code of the issue`);
      }
      return {
        text: "Each separator becomes a dash of its own, so a run of them makes a run of dashes. Match runs instead.",
        gist: "a dash per separator: match runs",
        calls: [{ tool: "edit_file", input: { path: SOURCE, ...EDIT_1 } }],
      };
    }
    case 2:
    case 4:
      if (typeof results.get("edit_file") !== "string") return stop("my edit failed");
      return { text: "Run the tests.", calls: [{ tool: "run_tests", input: {} }] };
    case 3:
      // The first edit fixes one test; the other must now fail on a trailing dash only.
      if (tests?.failed !== 1 || !tests.failures[0]?.includes("got 'hello-world-'")) {
        return stop(`the tests do not reflect my edit: ${summary(tests)}`);
      }
      return {
        text: "Runs collapse now, but a separator at the end still leaves a dash. Trim dashes at both ends.",
        gist: "a dash is left at the end: trim",
        calls: [{ tool: "edit_file", input: { path: SOURCE, ...EDIT_2 } }],
      };
    case 5:
      if (tests?.failed !== 0 || tests.passed !== 4) {
        return stop(`the tests still fail: ${summary(tests)}`);
      }
      return {
        text: "All 4 tests pass. Commit the fix on a branch.",
        gist: "all 4 tests pass",
        calls: [{ tool: "commit", input: { branch: "fix/issue-42", message: PR_TITLE } }],
      };
    case 6: {
      const commit = results.get("commit") as { branch?: string; sha?: string } | undefined;
      if (!commit?.sha) return stop("the commit failed");
      return {
        text: "Open the pull request.",
        calls: [
          {
            tool: "open_pull_request",
            input: {
              title: PR_TITLE,
              branch: commit.branch,
              body: `Fixes #42. \`/[^a-z0-9]+/g\` turns each run of separators into one dash, and dashes at both ends are trimmed. All 4 tests pass (commit ${commit.sha}).`,
            },
          },
        ],
      };
    }
    case 7: {
      const pr = results.get("open_pull_request") as { number?: number } | undefined;
      if (!pr?.number) return stop("the pull request was not opened");
      return { text: `Opened pull request #${pr.number}; it is ready for review.`, calls: [] };
    }
    default:
      return stop(`turn ${turn + 1} is past the end of my script`);
  }
}

/** The results of each tool in the conversation, oldest first (errors as { error }). */
function toolResults(prompt: Prompt): Map<string, unknown[]> {
  const out = new Map<string, unknown[]>();
  const add = (tool: string, v: unknown) => out.set(tool, [...(out.get(tool) ?? []), v]);
  for (const m of prompt) {
    if (m.role !== "tool") continue;
    for (const p of m.content) {
      if (p.type !== "tool-result") continue;
      const o = p.output;
      if (o.type === "text" || o.type === "json") add(p.toolName, o.value);
      else if (o.type === "error-text" || o.type === "error-json") {
        add(p.toolName, { error: o.value });
      }
    }
  }
  return out;
}

export function modelKey(turn: number): string {
  const name = `model:${MODEL.modelId}`;
  return turn === 0 ? name : `${name}#${turn + 1}`;
}

export function createScriptedModel(report: Reporter): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    ...MODEL,
    doGenerate: async ({ prompt }) => {
      const turn = prompt.filter((m) => m.role === "assistant").length;
      const a = answer(turn, toolResults(prompt));
      const content: Content = [{ type: "text", text: a.text }];
      a.calls.forEach((c, i) => {
        content.push({
          type: "tool-call",
          toolCallId: `call_${turn + 1}${"abcdefgh"[i]}`,
          toolName: c.tool,
          input: JSON.stringify(c.input),
        });
      });
      const input = Math.ceil(JSON.stringify(prompt).length / 4);
      const output = Math.ceil(JSON.stringify(content).length / 4);
      const calls = [...new Set(a.calls.map((c) => c.tool))].map((tool) => {
        const n = a.calls.filter((c) => c.tool === tool).length;
        const path = a.calls.find((c) => c.tool === tool)?.input.path;
        return n > 1 ? `${tool} ×${n}` : path ? `${tool} ${path}` : tool;
      });
      const said = a.calls.length === 0 ? `"${a.text}"` : a.gist ? `${a.gist} ` : "";
      report.effect({
        key: modelKey(turn),
        kind: "model",
        detail: `${said}${calls.length > 0 ? `→ ${calls.join(", ")}` : ""}`,
        tokens: input + output,
      });
      const finish = a.calls.length > 0 ? "tool-calls" : "stop";
      return {
        content,
        finishReason: { unified: finish, raw: finish },
        usage: {
          inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
          outputTokens: { total: output, text: output, reasoning: 0 },
        },
        warnings: [],
      };
    },
  });
}
