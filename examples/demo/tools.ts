// The coding agent's tools, as AI SDK tools. The ones that work in the repository (read,
// edit, test, commit) are given to ai.tools with the workspace, so each call is a
// workspace step: what it changed is checkpointed with its record. Opening the pull
// request is an effectTool: the forge has no idempotency keys, so a call cut by a crash is
// reconciled (found by its marker) instead of being made twice.

import { readFile, writeFile } from "node:fs/promises";
import { resolve, sep } from "node:path";
import { tool } from "ai";
import { z } from "zod";
import { effectTool } from "../../src/ai/index.js";
import type { ForgeClient } from "../../src/testing/fake-forge.js";
import type { Reporter } from "./ledger.js";
import { git, runTests } from "./repo.js";

export interface ToolDeps {
  /** The repository: the workspace's directory in this execution. */
  dir: string;
  forge: ForgeClient;
  report: Reporter;
  /** Runs before each test run (the demo looks at the directory, or stops the worker). */
  beforeTests?: (key: string, dir: string) => Promise<void>;
}

/** The journal key of a tool call (cairn/ai names it after the tool and its call id). */
export const toolKey = (toolName: string, toolCallId: string) => `tool:${toolName}:${toolCallId}`;

function inside(dir: string, path: string): string {
  const abs = resolve(dir, path);
  if (!abs.startsWith(dir + sep)) {
    throw new Error(`path "${path}" is outside the repository; give a path relative to its root`);
  }
  return abs;
}

/** Tools that read or change the repository: run them as workspace steps. */
export function repositoryTools(d: ToolDeps) {
  return {
    read_file: tool({
      description: "Read a file of the repository",
      inputSchema: z.object({ path: z.string() }),
      execute: async ({ path }, { toolCallId }) => {
        const text = await readFile(inside(d.dir, path), "utf8");
        d.report.effect({
          key: toolKey("read_file", toolCallId),
          kind: "read",
          detail: `${path} (${text.split("\n").length - 1} lines)`,
        });
        return text;
      },
    }),
    edit_file: tool({
      description: "Replace one exact, unique snippet of a file",
      inputSchema: z.object({ path: z.string(), find: z.string(), replace: z.string() }),
      execute: async ({ path, find, replace }, { toolCallId }) => {
        const file = inside(d.dir, path);
        const text = await readFile(file, "utf8");
        const count = find === "" ? 0 : text.split(find).length - 1;
        if (count !== 1) {
          throw new Error(`"${find}" occurs ${count} times in ${path}; give a unique snippet`);
        }
        await writeFile(
          file,
          text.replace(find, () => replace),
        );
        d.report.effect({
          key: toolKey("edit_file", toolCallId),
          kind: "edit",
          detail: `${path}: ${find} → ${replace}`,
        });
        return `Edited ${path}: replaced 1 occurrence.`;
      },
    }),
    run_tests: tool({
      description: "Run the repository's tests (node --test)",
      inputSchema: z.object({}),
      execute: async (_input, { toolCallId, abortSignal }) => {
        const key = toolKey("run_tests", toolCallId);
        await d.beforeTests?.(key, d.dir);
        const r = await runTests(d.dir, abortSignal);
        d.report.effect({
          key,
          kind: "test",
          detail: `node --test: ${r.passed} passed, ${r.failed} failed${r.failed > 0 ? ` (${r.failures[0]?.replace(/^.*: /, "")})` : ""}`,
        });
        return r;
      },
    }),
    commit: tool({
      description: "Commit every change on a new branch",
      inputSchema: z.object({ branch: z.string(), message: z.string() }),
      execute: async ({ branch, message }, { toolCallId }) => {
        await git(["checkout", "-q", "-b", branch], d.dir);
        await git(["commit", "-q", "-a", "-m", message], d.dir);
        const sha = (await git(["rev-parse", "--short", "HEAD"], d.dir)).trim();
        const diff = await git(["show", "--format=", "--unified=0", "HEAD"], d.dir);
        d.report.effect({
          key: toolKey("commit", toolCallId),
          kind: "git",
          detail: `git commit on ${branch}: ${sha}`,
        });
        return { branch, sha, diff };
      },
    }),
  };
}

export interface OpenedPullRequest {
  number: number;
  url: string;
}

/** Tools with an effect outside the repository: effects, not workspace steps. */
export function forgeTools(d: ToolDeps) {
  return {
    open_pull_request: effectTool({
      description: "Open a pull request for a branch",
      inputSchema: z.object({ title: z.string(), body: z.string(), branch: z.string() }),
      perform: async ({ title, body, branch }, { idempotencyKey, toolCallId, abortSignal }) => {
        const pr = await d.forge.createPullRequest(
          { title, body: `${body}\n\nBranch: ${branch}`, marker: idempotencyKey },
          { signal: abortSignal },
        );
        d.report.effect({
          key: toolKey("open_pull_request", toolCallId),
          kind: "pull-request",
          detail: `POST /pulls → pull request #${pr.number}`,
        });
        return { number: pr.number, url: pr.url } satisfies OpenedPullRequest;
      },
      reconcile: async (_input, { idempotencyKey, toolCallId }) => {
        const found = await d.forge.findPullRequestByMarker(idempotencyKey);
        d.report.effect({
          key: toolKey("open_pull_request", toolCallId),
          kind: "lookup",
          detail: found ? `found pull request #${found.number} by its marker` : "none found",
        });
        return found
          ? ({ number: found.number, url: found.url } satisfies OpenedPullRequest)
          : undefined;
      },
    }),
  };
}
