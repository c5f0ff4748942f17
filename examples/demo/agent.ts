// The demo's workflow: a coding agent that fixes issue #42. It clones the repository into
// a workspace, lets the model work through the AI SDK's generateText (plan, read, edit,
// test, fix, test, commit, open a pull request), asks a person to approve the merge, and
// merges. Every model call and tool call is a recorded step (cairn/ai); the repository is
// a workspace, so its edits are state too and come back on any machine.

import { generateText, stepCountIs } from "ai";
import type { Ai, LanguageModelV4 } from "../../src/ai/index.js";
import { workflow } from "../../src/index.js";
import type { ForgeClient } from "../../src/testing/fake-forge.js";
import type { Reporter } from "./ledger.js";
import { fingerprint, git, type ISSUE } from "./repo.js";
import { forgeTools, type OpenedPullRequest, repositoryTools } from "./tools.js";

export const RUN_ID = "fix-issue-42";

export interface FixIssueInput {
  issue: typeof ISSUE;
  /** Where the forge's copy of the repository lives (what `git clone` is given). */
  upstream: string;
}

export interface FixIssueOutput {
  pullRequest: OpenedPullRequest;
  merged: boolean;
  approval: { decision: string; by?: string; via?: string };
}

export interface AgentDeps {
  ai: Ai;
  model: LanguageModelV4;
  forge: ForgeClient;
  report: Reporter;
  beforeTests?: (key: string, dir: string) => Promise<void>;
}

const SYSTEM =
  "You are a careful coding agent. Fix the issue in the repository with the smallest change, run the tests until they pass, commit on a branch and open a pull request.";

export function defineFixIssue(deps: AgentDeps) {
  const { ai, forge, report } = deps;
  return workflow(
    { name: "fix-issue", version: "1", budget: { usd: 1 } },
    async (ctx, input: FixIssueInput): Promise<FixIssueOutput> => {
      // The repository is part of the run's state. Its .git too: the agent commits there.
      const ws = await ctx.workspace("repo", { defaultIgnore: false, ignore: ["node_modules/"] });
      await ws.step("clone", async () => {
        await git(["clone", "-q", input.upstream, ws.dir], ".");
        report.effect({ key: "clone", kind: "git", detail: `git clone → ${ws.dir}` });
        return { files: fingerprint(ws.dir).size };
      });

      const tools = { dir: ws.dir, forge, report, beforeTests: deps.beforeTests };
      const result = await generateText({
        model: ai.model(ctx, deps.model),
        system: SYSTEM,
        prompt: `Issue #${input.issue.number}: ${input.issue.title}`,
        tools: {
          ...ai.tools(ctx, repositoryTools(tools), { workspace: ws }),
          ...ai.tools(ctx, forgeTools(tools)),
        },
        stopWhen: stepCountIs(12),
      });
      const outputs = result.steps.flatMap((s) => s.toolResults);
      const opened = outputs.find((r) => r.toolName === "open_pull_request");
      const pr = opened?.output as OpenedPullRequest | undefined;
      const title = (opened?.input as { title?: string } | undefined)?.title;
      const commit = outputs.find((r) => r.toolName === "commit")?.output as
        | { sha: string; diff: string }
        | undefined;
      if (!pr || !commit) {
        throw new Error(`The agent stopped without a pull request: "${result.text}"`);
      }

      // A person decides. The run waits holding no worker, no lease, no memory.
      const decision = await ctx.approval("merge", {
        request: {
          summary: `Merge pull request #${pr.number}: ${title}`,
          pr: pr.url,
          commit: commit.sha,
          diff: commit.diff,
        },
        timeout: "1d",
        onTimeout: "reject",
      });
      const approval = { decision: decision.decision, by: decision.by, via: decision.via };
      if (!decision.approved) return { pullRequest: pr, merged: false, approval };

      // The forge refuses a second merge; after a crash, reconcile reads the pull request.
      await ctx.effect("merge-pr", {
        perform: async (_key, s) => {
          await forge.mergePullRequest(pr.number, { signal: s.signal });
          report.effect({
            key: "merge-pr",
            kind: "merge",
            detail: `POST /pulls/${pr.number}/merge → merged`,
          });
          return true;
        },
        reconcile: async () => ((await forge.getPullRequest(pr.number))?.merged ? true : undefined),
      });
      return { pullRequest: pr, merged: true, approval };
    },
  );
}
