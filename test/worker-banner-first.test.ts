// `cairn worker` printed what the engine reported while it opened the store before its
// banner: a worker started after another one on this host was SIGKILLed printed
// `12:00:00.000 took over the runs of dead worker "wrk_…"` and only then `cairn worker
// wrk_… (pid …)`; with --json the first line was a "takeover", not "started". The engine's
// lines now wait for the banner (worker-log.ts, holdUntilStarted).

import { writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { ROOT, startCairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const INDEX = join(ROOT, "src/index.ts");

describe("cairn worker: the banner comes first", () => {
  const dir = tempDir();
  const children: Array<ReturnType<typeof startCairn>> = [];
  afterAll(() => {
    for (const w of children) if (w.child.exitCode === null) w.child.kill("SIGKILL");
    dir.cleanup();
  });

  it("before the takeover of a dead worker's runs that its start did", async () => {
    const modulePath = join(dir.dir, "workflows.mjs");
    writeFileSync(
      modulePath,
      `import { workflow } from ${JSON.stringify(pathToFileURL(INDEX).href)};
export const w = workflow({ name: "banner", version: "1" }, async (ctx) => ctx.step("s", () => 1));
`,
    );
    const env = { CAIRN_STORE: `sqlite:${join(dir.dir, "c.db")}` };
    const args = ["worker", relative(ROOT, modulePath), "--json"];
    const first = startCairn(args, env);
    children.push(first);
    await until(() => first.output.stdout.includes('"started"'), "the first worker's banner");
    first.child.kill("SIGKILL");
    await until(() => first.child.exitCode !== null || first.child.signalCode !== null, "kill");

    const second = startCairn(args, env);
    children.push(second);
    await until(() => second.output.stdout.includes('"takeover"'), "the second worker's takeover");
    const events = second.output.stdout
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => (JSON.parse(l) as { event?: string }).event);
    expect(events.slice(0, 2)).toEqual(["started", "takeover"]);
    second.child.kill("SIGTERM");
    await until(() => second.child.exitCode !== null, "the second worker's stop");
    expect(second.child.exitCode).toBe(0);
  });
});
