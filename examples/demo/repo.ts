// The small project the demo's agent fixes: a slugify() with a bug (issue #42) and a test
// file in which two of four tests fail, as a real git repository. Also the few things done
// to it from outside the agent: run git, run its tests with `node --test`, and take a
// fingerprint of a directory (to compare two of them byte for byte).

import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import {
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";

export const ISSUE = {
  number: 42,
  title: 'slugify("Hello,  World!") returns "hello---world-"',
};

const FILES: Record<string, string> = {
  "package.json": `${JSON.stringify(
    { name: "slugify", private: true, type: "module", scripts: { test: "node --test" } },
    null,
    2,
  )}\n`,
  "src/slugify.mjs": `// Turns a title into a URL slug.
export function slugify(text) {
  return text.toLowerCase().replace(/[^a-z0-9]/g, "-");
}
`,
  "test/slugify.test.mjs": `import assert from "node:assert/strict";
import { test } from "node:test";
import { slugify } from "../src/slugify.mjs";

test("lowercases words", () => {
  assert.equal(slugify("Cairn"), "cairn");
});

test("keeps digits", () => {
  assert.equal(slugify("Route 66"), "route-66");
});

test("collapses runs of separators (issue #42)", () => {
  assert.equal(slugify("Hello,  World"), "hello-world");
});

test("trims separators at both ends (issue #42)", () => {
  assert.equal(slugify("Hello,  World!"), "hello-world");
});
`,
};

/** git without the user's or the system's configuration (hooks, signing, aliases), with
 *  a fixed identity: the demo's repositories behave the same on every machine. */
const GIT_ENV = {
  ...process.env,
  GIT_CONFIG_GLOBAL: "/dev/null",
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_TERMINAL_PROMPT: "0",
  GIT_AUTHOR_NAME: "cairn demo agent",
  GIT_AUTHOR_EMAIL: "agent@cairn.invalid",
  GIT_COMMITTER_NAME: "cairn demo agent",
  GIT_COMMITTER_EMAIL: "agent@cairn.invalid",
};

export function git(args: string[], cwd: string, signal?: AbortSignal): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      "git",
      args,
      { cwd, env: GIT_ENV, timeout: 20_000, ...(signal ? { signal } : {}) },
      (err, stdout, stderr) => {
        if ((err as NodeJS.ErrnoException | null)?.code === "ENOENT") {
          reject(
            new Error("git is not installed here; the demo's agent works in a git repository"),
          );
        } else if (err) reject(new Error(`git ${args[0]} failed: ${stderr.trim() || err.message}`));
        else resolve(stdout);
      },
    );
  });
}

/** Creates the upstream repository (the one the forge hosts) with the buggy project. */
export async function createUpstream(dir: string): Promise<void> {
  for (const [path, content] of Object.entries(FILES)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  await git(["init", "-q", "-b", "main"], dir);
  await git(["add", "-A"], dir);
  await git(["commit", "-q", "-m", "slugify, with the tests of issue #42"], dir);
}

export interface TestReport {
  passed: number;
  failed: number;
  /** Each failing test's name, expected and actual value. */
  failures: string[];
}

/** Runs the project's tests in a child `node --test` (as `npm test` would). */
export function runTests(dir: string, signal?: AbortSignal): Promise<TestReport> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ["--test", "--test-reporter=tap"],
      { cwd: dir, timeout: 30_000, ...(signal ? { signal } : {}) },
      (err, stdout) => {
        const passed = Number(/^# pass (\d+)/m.exec(stdout)?.[1]);
        const failed = Number(/^# fail (\d+)/m.exec(stdout)?.[1]);
        // node --test exits 1 when a test fails: that is a report, not an error.
        if (Number.isNaN(passed) || Number.isNaN(failed)) {
          reject(err ?? new Error("node --test printed no summary"));
          return;
        }
        const failures: string[] = [];
        for (const m of stdout.matchAll(/^\s*not ok \d+ - (.+)$/gm)) {
          const rest = stdout.slice(m.index);
          const expected = /^\s+expected: (.+)$/m.exec(rest)?.[1] ?? "?";
          const actual = /^\s+actual: (.+)$/m.exec(rest)?.[1] ?? "?";
          const name = (m[1] ?? "").replaceAll("\\#", "#");
          failures.push(`${name}: expected ${expected}, got ${actual}`);
        }
        resolve({ passed, failed, failures });
      },
    );
  });
}

/** Every entry under `dir`: files by sha-256 and permission bits, symlinks by target,
 *  directories by name. Two directories with equal fingerprints hold the same bytes. */
export function fingerprint(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (rel: string) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const path = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(dir, path));
      if (st.isSymbolicLink()) out.set(path, `link ${readlinkSync(join(dir, path))}`);
      else if (st.isDirectory()) {
        out.set(path, "dir");
        walk(path);
      } else {
        const hash = createHash("sha256")
          .update(readFileSync(join(dir, path)))
          .digest("hex");
        out.set(path, `${(st.mode & 0o777).toString(8)} ${hash}`);
      }
    }
  };
  walk("");
  return out;
}

/** Paths whose entry differs between two fingerprints (missing on one side included). */
export function differences(a: Map<string, string>, b: Map<string, string>): string[] {
  const paths = new Set([...a.keys(), ...b.keys()]);
  return [...paths].filter((p) => a.get(p) !== b.get(p)).sort();
}
