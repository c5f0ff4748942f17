// The tiny project the demo's workflow fixes: a slugify() with a bug (issue #42: repeated
// and trailing dashes), a test file, and a real test run with `node --test`.

import { execFile } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

export const ISSUE = {
  number: 42,
  title: 'slugify("Hello,  World!") returns "hello---world-"',
};

export const BUGGY_SOURCE = `export function slugify(text) {
  return text.toLowerCase().replace(/[^a-z0-9]/g, "-");
}
`;

export const FIXED_SOURCE = `export function slugify(text) {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
}
`;

const TESTS = `import assert from "node:assert/strict";
import { test } from "node:test";
import { slugify } from "../src/slugify.mjs";

test("lowercases words", () => {
  assert.equal(slugify("Cairn"), "cairn");
});
`;

export const TESTS_WITH_REGRESSION = `${TESTS}
test("collapses separators (issue #42)", () => {
  assert.equal(slugify("Hello,  World!"), "hello-world");
});

test("trims leading and trailing separators", () => {
  assert.equal(slugify("  -- cairn --  "), "cairn");
});
`;

/** Writes the buggy project into `dir`. */
export function seedProject(dir: string): void {
  writeProjectFile(dir, "src/slugify.mjs", BUGGY_SOURCE);
  writeProjectFile(dir, "test/slugify.test.mjs", TESTS);
}

export function writeProjectFile(dir: string, path: string, content: string): void {
  const file = join(dir, path);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, content);
}

export interface TestReport {
  passed: number;
  failed: number;
}

/** Runs the project's tests in a child `node --test` and counts passes and failures. */
export function runTests(dir: string, signal?: AbortSignal): Promise<TestReport> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ["--test", "--test-reporter=tap", "test/slugify.test.mjs"],
      { cwd: dir, timeout: 20_000, ...(signal ? { signal } : {}) },
      (err, stdout) => {
        const passed = Number(/^# pass (\d+)/m.exec(stdout)?.[1]);
        const failed = Number(/^# fail (\d+)/m.exec(stdout)?.[1]);
        // node --test exits 1 when a test fails; that is a report, not an error.
        if (Number.isNaN(passed) || Number.isNaN(failed)) {
          reject(err ?? new Error("node --test printed no summary"));
        } else {
          resolve({ passed, failed });
        }
      },
    );
  });
}
