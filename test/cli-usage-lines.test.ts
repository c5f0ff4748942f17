// `cairn ui --help` began "Usage: cairn ui [--port N] [--host H] [--token T] [--read-token R]
// [--module FILE [--import tsx]]" and left out --allow-host, --base-path and --poll, which
// its Options list (and docs/API.md) give: a reader of the usage line, the one line most
// read, did not learn that the dashboard can be served under a path. Every command's usage
// line now names each option its help lists (ui.ts).

import { describe, expect, it } from "vitest";
import type { Command } from "../src/cli/command.js";
import { approvalLink } from "../src/cli/commands/approval-link.js";
import { approve, reject } from "../src/cli/commands/approve.js";
import { cancel } from "../src/cli/commands/cancel.js";
import { checkReplayCommand } from "../src/cli/commands/check-replay.js";
import { fork } from "../src/cli/commands/fork.js";
import { gc } from "../src/cli/commands/gc.js";
import { resume } from "../src/cli/commands/resume.js";
import { runs } from "../src/cli/commands/runs.js";
import { send } from "../src/cli/commands/send.js";
import { show } from "../src/cli/commands/show.js";
import { start } from "../src/cli/commands/start.js";
import { ui } from "../src/cli/commands/ui.js";
import { worker } from "../src/cli/commands/worker.js";

const COMMANDS: Command[] = [
  runs,
  show,
  start,
  send,
  cancel,
  resume,
  fork,
  approve,
  reject,
  approvalLink,
  worker,
  checkReplayCommand,
  gc,
  ui,
];

describe("cairn <command> --help: the usage line", () => {
  it("names every option the command's Options list gives", () => {
    const lacking: string[] = [];
    for (const c of COMMANDS) {
      const usage = c.help.split("\n")[0] ?? "";
      const options = c.help.split("\nOptions:\n")[1]?.split("\n\n")[0] ?? "";
      const listed = [...options.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1] as string);
      for (const o of listed) {
        if (o !== "--help" && !new RegExp(`${o}\\b`).test(usage)) lacking.push(`${c.name} ${o}`);
      }
    }
    expect(lacking).toEqual([]);
  });
});
