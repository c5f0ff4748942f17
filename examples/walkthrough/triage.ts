// The walkthrough's workflow: triage a GitHub-style issue. A (scripted) model labels it and
// drafts a reply, a person approves the reply, and the reply is posted as a comment. The
// comment is an effect on a system without idempotency keys (here a local file standing in
// for the issue tracker): `reconcile` finds a comment by the key it was posted with, so a
// worker killed between posting and recording never posts twice.

import { appendFileSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import { workflow } from "cairn";

export interface TriageInput {
  issue: number;
  title: string;
}

/** The issue tracker's comments: one JSON line per comment. */
const COMMENTS = ".cairn/comments.jsonl";

function findComment(marker: string): { id: string; by: number } | undefined {
  if (!existsSync(COMMENTS)) return undefined;
  for (const line of readFileSync(COMMENTS, "utf8").split("\n")) {
    if (line.includes(marker)) return JSON.parse(line) as { id: string; by: number };
  }
  return undefined;
}

export const triage = workflow(
  { name: "triage", version: "1", budget: { tokens: 10_000 } },
  async (ctx, input: TriageInput) => {
    const label = await ctx.step("label", (s) => {
      s.spend({ tokens: 120 }); // what the model call cost, recorded with this attempt
      return /crash|error|fail/i.test(input.title) ? "bug" : "question";
    });
    const reply = await ctx.step("draft-reply", (s) => {
      s.spend({ tokens: 480 });
      return `Thanks for reporting #${input.issue}; we filed it as a ${label}.`;
    });

    const approval = await ctx.waitForEvent<{ ok: boolean }>("approval", { timeout: "2d" });
    if (approval.timedOut || !approval.payload.ok) return { label, posted: false };

    const comment = await ctx.effect("post-comment", {
      perform: (key) => {
        const posted = { id: `c-${input.issue}`, marker: key, by: process.pid, text: reply };
        mkdirSync(".cairn", { recursive: true });
        appendFileSync(COMMENTS, `${JSON.stringify(posted)}\n`);
        return { id: posted.id, by: posted.by };
      },
      reconcile: (key) => findComment(key),
    });
    return { label, posted: true, comment: comment.id, postedBy: comment.by };
  },
);
