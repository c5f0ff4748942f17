// `cairn approve <id> <name>` and `cairn reject <id> <name>`: answer an approval a run asked
// for (ctx.approval). The answer records who (--by, default the OS user), when, and an
// optional comment and data; an approval is answered once, so a second answer fails.

import { userInfo } from "node:os";
import type { ApprovalView } from "../../index.js";
import { type Command, defineCommand } from "../command.js";
import { parseJson } from "../flag-values.js";
import { iso, printable, quoted, toJson } from "../format.js";
import { refusePlainTextInto, withClient } from "../store-spec.js";

function answerCommand(decision: "approve" | "reject"): Command {
  const verb = decision === "approve" ? "approved" : "rejected";
  return defineCommand({
    name: decision,
    summary: `${decision} an approval a run waits for`,
    help: `Usage: cairn ${decision} <id> <name> [--comment TEXT] [--by WHO] [--answer JSON] [--json]

Answers approval <name> of run <id> (the name given to ctx.approval, or its key such as
"review#2"): the run continues with the decision "${verb}". The answer records who
answered, when, and the comment. An approval is answered once: answering it again, after
its timeout, or for a finished run fails (exit code 1) and changes nothing.

Options:
  --comment <text>  why (recorded with the answer)
  --by <who>        who answers (default: $CAIRN_APPROVER, else your OS user name)
  --answer <json>   structured answer data, checked by the approval's answer schema
  --json            print the approval afterwards as JSON
  -h, --help        show this help`,
    options: {
      comment: { type: "string" },
      by: { type: "string" },
      answer: { type: "string" },
      json: { type: "boolean" },
    },
    positionals: ["id", "name"],

    async run({ values, positionals: [id, name] }, ctx) {
      const answer =
        values.answer === undefined
          ? undefined
          : parseJson(values.answer, "--answer", `objects: '{"choice": "a"}'`);
      const options = {
        by: values.by ?? (ctx.env.CAIRN_APPROVER || osUser()),
        via: "cli",
        ...(values.comment !== undefined ? { comment: values.comment } : {}),
        ...(answer !== undefined ? { answer } : {}),
      };
      const view = await withClient(values, ctx, async (engine) => {
        if (values.comment !== undefined || answer !== undefined) {
          await refusePlainTextInto(engine, id, ctx.env, "the comment or answer");
        }
        return decision === "approve"
          ? engine.approve(id, name, options)
          : engine.reject(id, name, options);
      });
      ctx.out(values.json ? toJson(view, 2) : describe(view));
      return 0;
    },
  });
}

function osUser(): string {
  try {
    return userInfo().username || "cli";
  } catch {
    return "cli";
  }
}

function describe(a: ApprovalView): string {
  // Text from the command line or a run (a --by holding a line break): escaped, so the line
  // stays one line, as `cairn show` writes the same answer.
  return `${a.status === "approved" ? "Approved" : "Rejected"} ${quoted(a.key)} of run ${quoted(a.runId)} as ${a.answeredBy === undefined ? "?" : printable(a.answeredBy)} at ${iso(a.answeredAt)}.`;
}

export const approve = answerCommand("approve");
export const reject = answerCommand("reject");
