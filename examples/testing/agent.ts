// The workflow the example tests exercise: an agent fixing an issue in twelve calls — ten
// tool calls (steps, each passing its idempotency key to the tool service), a person's
// approval (a wait with a two-day timeout), then the pull request (an effect: the forge has
// no idempotency keys, so a marker and reconcile keep it to one). Version 2 adds a lint
// pass before the approval; runs started on version 1 finish on version 1.

import { workflow } from "cairn";

export interface AgentServices {
  /** A tool call; a repeat with the same key returns the first answer (idempotent). */
  callTool(tool: string, input: string, key: string): Promise<string>;
  /** Opens a pull request carrying `marker`; a repeat opens a second one. */
  openPullRequest(title: string, marker: string): Promise<{ number: number }>;
  /** The pull request carrying `marker`, if one was opened. */
  findPullRequest(marker: string): Promise<{ number: number } | undefined>;
}

export interface AgentOutput {
  outcome: "opened" | "abandoned";
  pullRequest?: number;
  notes: string[];
  version: string;
}

export const TOOLS = [
  "read-issue",
  "search-code",
  "read-file",
  "plan",
  "edit-file",
  "run-tests",
  "search-docs",
  "edit-file",
  "run-tests",
  "write-summary",
] as const;

export function defineAgent(services: AgentServices, version: "1" | "2" = "1") {
  return workflow(
    { name: "fix-issue", version, retry: { maxAttempts: 4, initialDelay: "1s" } },
    async (ctx, input: { issue: number }): Promise<AgentOutput> => {
      const notes: string[] = [];
      for (const [i, tool] of TOOLS.entries()) {
        notes.push(
          await ctx.step(`tool:${tool}`, (s) =>
            services.callTool(tool, `issue ${input.issue}, call ${i + 1}`, s.idempotencyKey),
          ),
        );
      }
      if (version === "2") {
        notes.push(
          await ctx.step("tool:lint", (s) => services.callTool("lint", "", s.idempotencyKey)),
        );
      }
      const approval = await ctx.waitForEvent<{ approved: boolean }>("approval", { timeout: "2d" });
      if (approval.timedOut || !approval.payload.approved) {
        return { outcome: "abandoned", notes, version };
      }
      const pr = await ctx.effect("open-pr", {
        perform: (marker) => services.openPullRequest(`Fix #${input.issue}`, marker),
        reconcile: (marker) => services.findPullRequest(marker),
      });
      return { outcome: "opened", pullRequest: pr.number, notes, version };
    },
  );
}
