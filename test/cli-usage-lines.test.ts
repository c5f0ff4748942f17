// `cairn ui --help` began "Usage: cairn ui [--port N] [--host H] [--token T] [--read-token R]
// [--module FILE [--import tsx]]" and left out --allow-host, --base-path and --poll, which
// its Options list (and docs/API.md) give: a reader of the usage line, the one line most
// read, did not learn that the dashboard can be served under a path. Every command's usage
// line now names each option its help lists (ui.ts).

import { describe, expect, it } from "vitest";
import { COMMANDS } from "../src/cli/commands/all.js";

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
