// examples/walkthrough/README.md, executed as written, so that it cannot drift from what
// cairn does. Its ```sh blocks run one line at a time in examples/walkthrough (`export`
// lines set the environment of the lines after them); the lines of a ```sh worker block
// start long-running workers (each waited for until it says it runs), and a
// `<!-- walkthrough: stop workers -->` marker stops them with SIGTERM, as Ctrl+C would.
// The commands use the built package (import "cairn" resolves to dist/ by the package's
// self-reference; `npx cairn` runs dist/cli/main.js), so the build runs first.
//
// Two substitutions, both for isolation: the PostgreSQL URL becomes the test database's,
// and the schema a fresh one (other sessions may run this file against the same server).

import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT } from "./helpers/cli.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { until } from "./helpers/sqlite.js";

const DIR = join(ROOT, "examples/walkthrough");
const README = readFileSync(join(DIR, "README.md"), "utf8");
const DOC_PG_URL = "postgres://postgres@127.0.0.1:5432/test";
const DOC_PG_SCHEMA = "walkthrough";

type Line =
  | { kind: "export"; name: string; value: string }
  | { kind: "run"; command: string }
  | { kind: "worker"; command: string }
  | { kind: "stop" };

/** The README's commands, in order. */
function commands(markdown: string): Line[] {
  const lines: Line[] = [];
  let block: "sh" | "worker" | "other" | undefined;
  for (const raw of markdown.split("\n")) {
    const fence = /^```(.*)$/.exec(raw);
    if (fence) {
      const info = fence[1]!.trim();
      block =
        block !== undefined
          ? undefined
          : info === "sh"
            ? "sh"
            : info === "sh worker"
              ? "worker"
              : "other";
      continue;
    }
    if (block === undefined && raw.trim() === "<!-- walkthrough: stop workers -->") {
      lines.push({ kind: "stop" });
    }
    if (block !== "sh" && block !== "worker") continue;
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const exported = /^export (\w+)=(\S+)$/.exec(line);
    if (exported) lines.push({ kind: "export", name: exported[1]!, value: exported[2]! });
    else lines.push({ kind: block === "worker" ? "worker" : "run", command: line });
  }
  return lines;
}

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function bash(command: string, env: NodeJS.ProcessEnv, detached = false): ChildProcess {
  return spawn("bash", ["-c", detached ? `exec ${command}` : command], {
    cwd: DIR,
    env,
    detached, // a worker gets its own process group: SIGTERM reaches npx's node child too
    stdio: ["ignore", "pipe", "pipe"],
  });
}

function collect(child: ChildProcess): { out: Ran; done: Promise<Ran> } {
  const out: Ran = { code: null, stdout: "", stderr: "" };
  child.stdout?.on("data", (d) => {
    out.stdout += d;
  });
  child.stderr?.on("data", (d) => {
    out.stderr += d;
  });
  const done = new Promise<Ran>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => {
      out.code = code;
      resolve(out);
    });
  });
  return { out, done };
}

const pgUrl = await postgresTestUrl();

/** Files under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name));
}

/** Why dist/ is not what `npm run build` would make of this checkout now, or undefined when
 *  it is: an output of a source file missing, or older than the newest input (a source,
 *  an asset, the build's configuration). `npm ci` builds it (prepare), so a CI run finds it
 *  fresh and does not compile src/ a second time (several seconds of CPU); a checkout whose
 *  sources changed since its last build is built first. */
function staleDist(): string | undefined {
  const src = join(ROOT, "src");
  const dist = join(ROOT, "dist");
  const inputs = [
    ...filesUnder(src),
    ...["package.json", "tsconfig.json", "tsconfig.build.json"].map((f) => join(ROOT, f)),
  ];
  const outputs: string[] = [];
  for (const f of filesUnder(src)) {
    const rel = relative(src, f);
    if (rel.endsWith(".test.ts")) continue;
    if (rel.endsWith(".ts") && !rel.endsWith(".d.ts")) {
      outputs.push(
        join(dist, rel.replace(/\.ts$/, ".js")),
        join(dist, rel.replace(/\.ts$/, ".d.ts")),
      );
    } else if (rel.startsWith(join("http", "ui", "assets"))) {
      outputs.push(join(dist, rel));
    }
  }
  const missing = outputs.find((f) => !existsSync(f));
  if (missing) return `${relative(ROOT, missing)} is missing`;
  const newest = inputs.reduce((a, f) => (statSync(f).mtimeMs > statSync(a).mtimeMs ? f : a));
  const oldest = outputs.reduce((a, f) => (statSync(f).mtimeMs < statSync(a).mtimeMs ? f : a));
  if (statSync(newest).mtimeMs > statSync(oldest).mtimeMs) {
    return `${relative(ROOT, newest)} is newer than ${relative(ROOT, oldest)}`;
  }
  return undefined;
}

describe("examples/walkthrough/README.md, as written", () => {
  const workers: Array<{ child: ChildProcess; done: Promise<Ran> }> = [];
  const ran = new Map<string, Ran>();
  const pg = pgUrl ? testSchema(pgUrl, "cairn_walkthrough") : undefined;

  beforeAll(async () => {
    rmSync(join(DIR, ".cairn"), { recursive: true, force: true });
    if (staleDist() === undefined) return;
    const build = await collect(
      spawn("npm", ["run", "build"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] }),
    ).done;
    expect(build.code, build.stdout + build.stderr).toBe(0);
  }, 180_000);

  afterAll(async () => {
    for (const w of workers) {
      if (w.child.exitCode === null && w.child.pid) process.kill(-w.child.pid, "SIGKILL");
    }
    rmSync(join(DIR, ".cairn"), { recursive: true, force: true });
    await pg?.drop();
  });

  async function stopWorkers(): Promise<void> {
    for (const w of workers.splice(0)) {
      process.kill(-w.child.pid!, "SIGTERM");
      const res = await w.done;
      expect(res.stdout).toContain("Worker stopped.");
      expect(res.stderr).toBe("");
    }
  }

  it("runs every command: SQLite with one worker, then PostgreSQL with two", async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, CAIRN_STORE: "", CAIRN_PG_SCHEMA: "" };
    delete env.NODE_OPTIONS; // as in a user's shell: no loader unless the command asks
    const all = commands(README);
    expect(all.filter((l) => l.kind === "worker")).toHaveLength(3);
    for (const line of all) {
      if (line.kind === "export") {
        if (line.value.startsWith("postgres://") && !pg) break; // no database: SQLite only
        env[line.name] =
          line.value === DOC_PG_URL
            ? pgUrl
            : line.value === DOC_PG_SCHEMA
              ? pg!.schema
              : line.value;
      } else if (line.kind === "stop") {
        await stopWorkers();
      } else if (line.kind === "worker") {
        const child = bash(line.command, env, true);
        const { out, done } = collect(child);
        workers.push({ child, done });
        await until(
          () => out.stdout.includes("Running;") || out.code !== null,
          line.command,
          60_000,
        );
        expect(out.code, out.stderr).toBeNull();
      } else {
        const res = await collect(bash(line.command, env)).done;
        expect(res.code, `${line.command}\n${res.stdout}\n${res.stderr}`).toBe(0);
        ran.set(line.command, res);
      }
    }

    const out = (command: string) => {
      const res = ran.get(command);
      expect(res, command).toBeDefined();
      return res!;
    };
    // SQLite: the starter, the CLI start, the typo warned about, the results, show.
    expect(out('npx tsx start-triage.ts 42 "App crashes on start"').stdout).toBe(
      'Started run "triage-42".\nIt is waiting for approval.\n',
    );
    expect(
      out(
        `npx cairn start triage --input '{"issue": 43, "title": "How do I log in?"}' --id triage-43`,
      ).stdout,
    ).toContain('Started run "triage-43" of triage@1.');
    expect(out("npx cairn runs").stdout).toMatch(
      /triage-42\s+triage@1\s+waiting\s+waiting for event "approval" until \d{4}-/,
    );
    expect(out(`npx cairn send triage-42 aproval '{"ok": true}'`).stderr).toContain(
      'cairn: warning: run "triage-42" is waiting for "approval", not "aproval"',
    );
    expect(out("npx tsx result.ts triage-42").stdout).toMatch(
      /^Posted comment c-42 \(worker pid \d+\)\.\n$/,
    );
    expect(out("npx tsx result.ts triage-43").stdout).toBe("Not posted.\n");
    const shown = out("npx cairn show triage-42").stdout;
    expect(shown).toMatch(/status\s+completed/);
    expect(shown).toMatch(/budget\s+tokens 600 of 10000/);
    expect(shown).toMatch(/post-comment\s+effect\s+completed\/performed\s+1\s/);
    expect(shown).toMatch(/Events not consumed by any wait \(1\):\n.*\n\s+\d+\s+aproval\s/);

    const comments = readFileSync(join(DIR, ".cairn/comments.jsonl"), "utf8").trim().split("\n");
    const ids = comments.map((c) => (JSON.parse(c) as { id: string }).id);
    if (!pg) {
      expect(ids).toEqual(["c-42"]);
      return;
    }
    // PostgreSQL: both runs posted once each, by one of the two workers.
    expect(ids.sort()).toEqual(["c-42", "c-7", "c-8"]);
    expect(out("npx tsx result.ts triage-7").stdout).toMatch(/^Posted comment c-7 /);
    expect(out("npx tsx result.ts triage-8").stdout).toMatch(/^Posted comment c-8 /);
    expect(out("npx cairn runs --status completed").stdout).toMatch(
      /triage-8\s+triage@1\s+completed/,
    );
  });
});
