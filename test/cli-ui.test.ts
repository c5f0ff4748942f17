// `cairn ui` as users run it: a child process (node + tsx) serving a real SQLite store,
// starting runs of a --module's workflows, refusing unsafe binds, stopping on SIGTERM.

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { ROOT, startCairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const INDEX = join(ROOT, "src/index.ts");

describe("cairn ui", () => {
  const dir = tempDir("cairn-cli-ui-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  const modulePath = join(dir.dir, "workflows.mjs");
  const running: Array<ReturnType<typeof startCairn>> = [];

  beforeAll(async () => {
    const greet = workflow({ name: "greet", version: "1" }, async (ctx, input: { name: string }) =>
      ctx.step("hello", () => `hello ${input.name}`),
    );
    const engine = createEngine({ store: sqliteStore(db), workflows: [greet], pollIntervalMs: 10 });
    await engine.start(greet, { name: "ana" }, { id: "greet-ana" });
    await until(
      async () => (await engine.getRun("greet-ana"))?.status === "completed",
      "greet-ana",
    );
    await engine.close();
    writeFileSync(
      modulePath,
      `import { workflow } from ${JSON.stringify(pathToFileURL(INDEX).href)};
export const greet = workflow({ name: "greet", version: "1" }, async (ctx, input) =>
  ctx.step("hello", () => \`hello \${input.name}\`));
`,
    );
  });

  afterAll(() => {
    for (const r of running) if (r.child.exitCode === null) r.child.kill("SIGKILL");
    dir.cleanup();
  });

  it("serves the dashboard and the API, starts runs of the module's workflows, stops on SIGTERM", async () => {
    const ui = startCairn(["ui", "--port", "0", "--module", modulePath, "--poll", "50"], env);
    running.push(ui);
    await until(() => ui.output.stdout.includes("Stop with Ctrl+C"), "started");
    const line = /cairn ui: (http:\/\/127\.0\.0\.1:\d+)\//.exec(ui.output.stdout)?.[1];
    expect(ui.output.stdout).toContain("Can start runs of: greet@1");
    const runs = (await (await fetch(`${line}/api/runs`)).json()) as {
      runs: Array<{ id: string }>;
    };
    expect(runs.runs.map((r) => r.id)).toEqual(["greet-ana"]);
    const page = await fetch(`${line}/runs/greet-ana`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("hello ana");
    const started = await fetch(`${line}/api/runs`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ workflow: "greet", input: { name: "li" }, id: "greet-li" }),
    });
    expect(started.status).toBe(201);
    expect(((await started.json()) as { run: unknown }).run).toMatchObject({
      id: "greet-li",
      status: "pending",
    });

    ui.child.kill("SIGTERM");
    const res = await ui.done;
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain("Received SIGTERM: stopping.");
  });

  it("refuses a bind beyond loopback without a token, bad options, and a missing store", async () => {
    const open = await startCairn(["ui", "--host", "0.0.0.0", "--port", "0"], env).done;
    expect(open.code).toBe(1);
    expect(open.stderr).toMatch(/^cairn: Refusing to listen on 0\.0\.0\.0 without a token/);

    const short = await startCairn(["ui", "--token", "abc"], env).done;
    expect(short.code).toBe(2);
    expect(short.stderr).toContain("--token must be at least 8 characters");

    const missing = await startCairn(["ui", "--store", `sqlite:${join(dir.dir, "nope.db")}`]).done;
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/No cairn store at/);

    const help = await startCairn(["ui", "--help"]).done;
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("Usage: cairn ui");
    const all = await startCairn(["--help"]).done;
    expect(all.stdout).toMatch(/^ {2}ui\s+serve the web dashboard and HTTP API$/m);
  });

  it("with a token on all addresses: 401 without it, 200 with it", async () => {
    const ui = startCairn(["ui", "--host", "0.0.0.0", "--port", "0"], {
      ...env,
      CAIRN_UI_TOKEN: "cli-token-0123456789",
    });
    running.push(ui);
    await until(() => ui.output.stdout.includes("Stop with Ctrl+C"), "started");
    const port = /cairn ui: http:\/\/0\.0\.0\.0:(\d+)\//.exec(ui.output.stdout)?.[1];
    expect(ui.output.stdout).toContain("Access needs a token: full (--token)");
    const base = `http://127.0.0.1:${port}`;
    expect((await fetch(`${base}/api/runs`)).status).toBe(401);
    const ok = await fetch(`${base}/api/runs`, {
      headers: { authorization: "Bearer cli-token-0123456789" },
    });
    expect(ok.status).toBe(200);
    ui.child.kill("SIGTERM");
    expect((await ui.done).code).toBe(0);
  });
});
