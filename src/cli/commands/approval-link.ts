// `cairn approval-link <id> <name>`: prints two links (approve, reject) that answer an
// approval without any other credential: signed with the first of $CAIRN_APPROVAL_KEYS,
// expiring, and usable once (the approval is answered once). The server behind --base-url
// (a `cairn ui` with the same keys) shows the request and asks for confirmation.

import { ApprovalNotFoundError, type ApprovalView, type Engine } from "../../index.js";
import { approvalKeysFromEnv } from "../approval-keys.js";
import { CliError, defineCommand, UsageError } from "../command.js";
import { parseDuration } from "../flag-values.js";
import { iso, printable, quoted, shellArg, toJson } from "../format.js";
import { withClient } from "../store-spec.js";

export const approvalLink = defineCommand({
  name: "approval-link",
  summary: "print signed links that approve or reject an approval",
  help: `Usage: cairn approval-link <id> <name> [--base-url URL] [--expires D] [--by WHO] [--json]

Prints an approve link and a reject link for approval <name> of run <id>, to send to the
person who decides (mail, chat). Opening one shows the request and asks to confirm; it
needs no other credential. Each link expires, and works once: after the approval is
answered (by a link, the CLI or the dashboard) every link to it is refused. An approval
that is not pending (answered, timed out, its run finished) gets no link (exit code 1);
nor does one the run has not asked for (the error lists those it has).

Links are signed with the first key of $CAIRN_APPROVAL_KEYS ("id=secret[,id2=secret2]",
each secret at least 32 characters, e.g. from "openssl rand -base64 32"); the server that
answers them ("cairn ui") must have the same keys in its $CAIRN_APPROVAL_KEYS. Rotate by
putting a new key first; drop the old one once its links have expired.

Options:
  --base-url <url>  where the dashboard is reached (default: $CAIRN_UI_URL)
  --expires <d>     how long the links work (default 7d; e.g. 30m, 12h, 2d)
  --by <who>        whom the links are for: recorded as who answered
  --json            print {"approve", "reject", "expiresAt"} as JSON
  -h, --help        show this help`,
  options: {
    "base-url": { type: "string" },
    expires: { type: "string" },
    by: { type: "string" },
    json: { type: "boolean" },
  },
  positionals: ["id", "name"],

  async run({ values, positionals: [id, name] }, ctx) {
    const baseUrl = values["base-url"] ?? (ctx.env.CAIRN_UI_URL || undefined);
    if (baseUrl === undefined) {
      throw new UsageError(
        "--base-url (or $CAIRN_UI_URL) is needed: where the dashboard is reached",
      );
    }
    // Read here so that a bad value names the flag (the engine's message names expiresIn).
    const expiresIn =
      values.expires === undefined ? undefined : parseDuration(values.expires, "expires", 1_000);
    const approvalKeys = approvalKeysFromEnv(ctx.env, { required: true });
    const links = await withClient(
      values,
      ctx,
      async (engine) => {
        try {
          const made = await engine.approvalLinks(id, name, {
            baseUrl,
            ...(expiresIn !== undefined ? { expiresIn } : {}),
            ...(values.by !== undefined ? { by: values.by } : {}),
          });
          // Links to an approval already answered (or timed out, or whose run ended) were
          // printed as if they worked; the person sent them got "already used". Tokens are
          // not stored: nothing was made that needs undoing.
          const token = made.approve.slice(made.approve.lastIndexOf("/") + 1);
          const { approval } = await engine.inspectApprovalLink(token);
          if (approval.status !== "pending") throw new CliError(notPending(id, approval));
          return made;
        } catch (err) {
          // "has not asked for approval (yet)" named none of those it has asked for (the
          // HTTP API's 404 lists them): a typo of a name or key was left to guess.
          if (err instanceof ApprovalNotFoundError) throw await notAsked(engine, id, name, err);
          throw err;
        }
      },
      { approvalKeys },
    );
    if (values.json) ctx.out(toJson(links, 2));
    else {
      ctx.out(`Approve: ${links.approve}`);
      ctx.out(`Reject:  ${links.reject}`);
      ctx.out(`(each works once, until ${iso(links.expiresAt)})`);
    }
    return 0;
  },
});

function notPending(id: string, a: ApprovalView): string {
  const what = `Approval ${quoted(a.key)} of run ${quoted(id)}`;
  const state =
    a.status === "approved" || a.status === "rejected"
      ? `was already ${a.status}${a.answeredBy !== undefined ? ` by ${printable(a.answeredBy)}` : ""}${a.answeredAt ? ` at ${iso(a.answeredAt)}` : ""}`
      : a.status === "timed-out"
        ? `timed out${a.deadline ? ` at ${iso(a.deadline)}` : ""} (the run took its onTimeout decision)`
        : "was closed: its run finished without an answer";
  return `${what} ${state}; a link to it would answer nothing, so none was printed`;
}

/** An approval the run has not asked for: the ones it has (key, name, state), and what to do. */
async function notAsked(
  engine: Engine,
  id: string,
  name: string,
  cause: ApprovalNotFoundError,
): Promise<CliError> {
  const asked = await engine.listApprovals(id).catch(() => undefined);
  if (asked === undefined) return new CliError(cause.message, { cause });
  const what = `Run ${quoted(id)} has not asked for approval ${quoted(name)}`;
  const arg = shellArg(id);
  if (asked.length === 0) {
    return new CliError(
      `${what}, nor any other yet; no link was printed. Make the link once the run asks for it (see where it is: cairn show ${arg})`,
      { cause },
    );
  }
  const list = asked
    .map(
      (a) => `${quoted(a.key)}${a.name !== a.key ? ` (name ${quoted(a.name)})` : ""} ${a.status}`,
    )
    .join(", ");
  const pending = asked.find((a) => a.status === "pending");
  const hint = pending
    ? `give one of them, e.g. cairn approval-link ${arg} ${shellArg(pending.key)}`
    : "none is pending; see the run: cairn show " + arg;
  return new CliError(`${what}; its approvals: ${list}; no link was printed: ${hint}`, { cause });
}
