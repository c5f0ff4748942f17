// A scripted, offline stand-in for an LLM: each task has a fixed answer, the latency is
// simulated, and usage is derived from the text sizes, so every run of the demo spends
// exactly the same tokens and dollars. Swap in a real model client and nothing else in
// the workflow changes.

import { setTimeout as delay } from "node:timers/promises";
import { FIXED_SOURCE, ISSUE, TESTS_WITH_REGRESSION } from "./project.js";

export interface ModelReply<T> {
  output: T;
  usage: { inputTokens: number; outputTokens: number; totalTokens: number };
  costUsd: number;
}

export interface ScriptedModel {
  generate<T>(
    task: string,
    prompt: string,
    options?: { signal?: AbortSignal },
  ): Promise<ModelReply<T>>;
}

/** Prices per million tokens, roughly those of a mid-size hosted model. */
const USD_PER_MTOK = { input: 3, output: 15 };

export function createScriptedModel(
  script: Record<string, (prompt: string) => unknown>,
  options: { latencyMs?: number } = {},
): ScriptedModel {
  const latencyMs = options.latencyMs ?? 300;
  return {
    async generate<T>(task: string, prompt: string, opts: { signal?: AbortSignal } = {}) {
      const answer = script[task];
      if (!answer) throw new Error(`scripted model: no answer for task "${task}"`);
      await delay(latencyMs, undefined, opts.signal ? { signal: opts.signal } : {});
      const output = answer(prompt) as T;
      const inputTokens = Math.ceil(prompt.length / 4) + 400; // + a system prompt
      const outputTokens = Math.ceil(JSON.stringify(output).length / 4);
      const costUsd =
        Math.round(inputTokens * USD_PER_MTOK.input + outputTokens * USD_PER_MTOK.output) / 1e6;
      return {
        output,
        usage: { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens },
        costUsd,
      };
    },
  };
}

export interface Plan {
  summary: string;
  edits: Array<{ path: string; content: string }>;
}

export interface PullRequestDraft {
  title: string;
  body: string;
}

/** The demo's script: a plan that fixes issue #42 and a pull request description. */
export function createDemoModel(options: { latencyMs?: number } = {}): ScriptedModel {
  return createScriptedModel(
    {
      plan: (): Plan => ({
        summary: "Collapse runs of separators into one dash and trim dashes at both ends.",
        edits: [
          { path: "src/slugify.mjs", content: FIXED_SOURCE },
          { path: "test/slugify.test.mjs", content: TESTS_WITH_REGRESSION },
        ],
      }),
      "write-pr": (): PullRequestDraft => ({
        title: `Fix #${ISSUE.number}: slugify collapses and trims separators`,
        body: [
          `Fixes #${ISSUE.number}.`,
          "",
          "- `/[^a-z0-9]+/` turns each run of separators into a single dash",
          "- leading and trailing dashes are trimmed",
          "- regression tests for both",
        ].join("\n"),
      }),
    },
    options,
  );
}
