// The demo's workflow: an agent fixing a bug. plan (model) -> edit files -> run tests ->
// draft the PR (model) -> open the PR on the forge (ctx.effect) -> notify the team.
//
// Every step reports whether it EXECUTED its function or was REPLAYED from the journal
// (its function not called), so the demo can show what a restarted worker skipped. The
// reporting is the only code outside steps that differs between runs, and it only prints.

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  RateLimitError,
  type StepContext,
  type StepOptions,
  type WorkflowContext,
  workflow,
} from "../../src/index.js";
import { type ForgeClient, ForgeHttpError } from "../../src/testing/fake-forge.js";
import type { Plan, PullRequestDraft, ScriptedModel } from "./fake-model.js";
import type { Ledger } from "./ledger.js";
import { runTests, writeProjectFile } from "./project.js";

export const RUN_ID = "fix-bug-42";

export interface FixBugInput {
  issue: { number: number; title: string };
  /** Directory of the project to fix. */
  workspace: string;
}

export interface FixBugOutput {
  pullRequest: { number: number; url: string };
  tests: { passed: number; failed: number };
}

/** What a worker tells the demo's main process, one JSON line each on stdout. */
export type DemoEvent =
  | { type: "worker"; worker: number; pid: number }
  | { type: "calling"; key: string; label: string; detail: string }
  | {
      type: "step";
      key: string;
      label: string;
      how: "executed" | "replayed" | "performed" | "reconciled";
      detail: string;
    }
  | { type: "done"; output: FixBugOutput };

export interface FixBugDeps {
  model: ScriptedModel;
  forge: ForgeClient;
  ledger: Ledger;
  report: (event: DemoEvent) => void;
}

export function defineFixBug(deps: FixBugDeps) {
  const { model, forge, ledger, report } = deps;

  return workflow(
    { name: "fix-bug", version: "1", retry: { maxAttempts: 3, initialDelay: "200ms" } },
    async (ctx, input: FixBugInput): Promise<FixBugOutput> => {
      const step = tracked(ctx, report);

      const plan = await step(
        "plan",
        "plan the fix",
        async (s, key) => {
          const prompt = `Issue #${input.issue.number}: ${input.issue.title}. Plan a fix.`;
          const r = await model.generate<Plan>("plan", prompt, { signal: s.signal });
          s.spend({ tokens: r.usage.totalTokens, usd: r.costUsd });
          ledger.record({
            kind: "effect",
            key,
            what: "model call",
            tokens: r.usage.totalTokens,
            usd: r.costUsd,
          });
          return r.output;
        },
        (p) => `${p.edits.length} edits planned`,
        { timeout: "30s" },
      );

      for (const edit of plan.edits) {
        await step(
          "edit",
          `edit ${edit.path}`,
          async (_s, key) => {
            await pause(150);
            writeProjectFile(input.workspace, edit.path, edit.content);
            ledger.record({ kind: "effect", key, what: `wrote ${edit.path}` });
            return { path: edit.path, bytes: Buffer.byteLength(edit.content) };
          },
          (r) => `${r.bytes} bytes written`,
        );
      }

      const tests = await step(
        "run-tests",
        "run the tests",
        async (s, key) => {
          const report = await runTests(input.workspace, s.signal);
          ledger.record({ kind: "effect", key, what: "ran node --test" });
          if (report.failed > 0) throw new Error(`${report.failed} tests failed`);
          return report;
        },
        (r) => `${r.passed} passed, ${r.failed} failed`,
      );

      const draft = await step(
        "write-pr",
        "draft the pull request",
        async (s, key) => {
          const prompt = `Describe the change for issue #${input.issue.number}: ${plan.summary}`;
          const r = await model.generate<PullRequestDraft>("write-pr", prompt, {
            signal: s.signal,
          });
          s.spend({ tokens: r.usage.totalTokens, usd: r.costUsd });
          ledger.record({
            kind: "effect",
            key,
            what: "model call",
            tokens: r.usage.totalTokens,
            usd: r.costUsd,
          });
          return r.output;
        },
        (d) => `"${d.title}"`,
      );

      // The forge has no idempotency keys: a blind retry would open a second PR. An effect
      // records its intent first; a resume that finds intent without completion asks
      // reconcile (a search by marker) before it would ever perform again.
      const pr = await step.effect("open-pr", "open the pull request", {
        perform: async (key, s) => {
          ledger.record({ kind: "effect", key: "open-pr", what: "POST /pulls" });
          try {
            const pull = await forge.createPullRequest(
              { title: draft.title, body: draft.body, marker: key },
              { signal: s.signal },
            );
            return { number: pull.number, url: pull.url };
          } catch (err) {
            if (err instanceof ForgeHttpError && err.status === 429) {
              throw new RateLimitError("The forge rate-limited POST /pulls", {
                retryAfter: err.retryAfterMs ?? 1_000,
                cause: err,
              });
            }
            throw err;
          }
        },
        reconcile: async (key) => {
          const found = await forge.findPullRequestByMarker(key);
          ledger.record({
            kind: "lookup",
            key: "open-pr",
            what: found ? `found PR #${found.number} by marker` : "no PR with this marker",
          });
          return found ? { number: found.number, url: found.url } : undefined;
        },
      });

      await step(
        "notify",
        "tell the team",
        async (_s, key) => {
          await pause(150);
          writeFileSync(
            join(input.workspace, "team-chat.log"),
            `PR #${pr.number} fixes issue #${input.issue.number}: ${pr.url}\n`,
            { flag: "a" },
          );
          ledger.record({ kind: "effect", key, what: "posted to team chat" });
          return { message: `posted PR #${pr.number} to #team` };
        },
        (r) => r.message,
      );

      return { pullRequest: pr, tests };
    },
  );
}

type Tracked = (<T>(
  name: string,
  label: string,
  fn: (s: StepContext, key: string) => Promise<T>,
  describe: (result: T) => string,
  options?: StepOptions,
) => Promise<T>) & {
  effect<T extends { number: number }>(
    name: string,
    label: string,
    effect: {
      perform: (key: string, s: StepContext) => Promise<T>;
      reconcile: (key: string) => Promise<T | undefined>;
    },
  ): Promise<T>;
};

/** Wraps ctx.step / ctx.effect to report whether each call executed or was replayed. The
 *  keys follow cairn's rule: a name's first call is `name`, later ones `name#2`, ... */
function tracked(ctx: WorkflowContext, report: (event: DemoEvent) => void): Tracked {
  const calls = new Map<string, number>();
  const keyOf = (name: string) => {
    const n = (calls.get(name) ?? 0) + 1;
    calls.set(name, n);
    return n === 1 ? name : `${name}#${n}`;
  };

  const step = async <T>(
    name: string,
    label: string,
    fn: (s: StepContext, key: string) => Promise<T>,
    describe: (result: T) => string,
    options?: StepOptions,
  ): Promise<T> => {
    const key = keyOf(name);
    let executed = false;
    const result = await ctx.step(
      name,
      (s) => {
        executed = true;
        return fn(s, key);
      },
      options,
    );
    report({
      type: "step",
      key,
      label,
      how: executed ? "executed" : "replayed",
      detail: describe(result),
    });
    return result;
  };

  const effect: Tracked["effect"] = async (name, label, e) => {
    const key = keyOf(name);
    let how = "replayed" as "replayed" | "performed" | "reconciled";
    const result = await ctx.effect(name, {
      perform: (idempotencyKey, s) => {
        how = "performed";
        report({ type: "calling", key, label, detail: "POST /pulls on the forge" });
        return e.perform(idempotencyKey, s);
      },
      reconcile: async (idempotencyKey) => {
        const found = await e.reconcile(idempotencyKey);
        if (found) how = "reconciled";
        return found;
      },
    });
    const detail =
      how === "reconciled"
        ? `found PR #${result.number} by its marker; not created again`
        : `PR #${result.number}`;
    report({ type: "step", key, label, how, detail });
    return result;
  };

  return Object.assign(step, { effect });
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
