import { fileURLToPath } from "node:url";
import { configDefaults, defineConfig } from "vitest/config";

// test/pg-restart.test.ts restarts the PostgreSQL server, which drops every connection on
// it: it runs in a project of its own whose group (sequence.groupOrder) starts only after
// every other test file has finished. `vitest run` (npm test) runs both, in that order.
const RESTARTS_POSTGRES = "test/pg-restart.test.ts";

export default defineConfig({
  // examples/ import the package by name, as a user's tests do ("cairn", "cairn/testing");
  // here those names mean the source, so the examples test the code of this checkout.
  resolve: {
    alias: [
      { find: /^cairn$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) },
      {
        find: /^cairn\/testing$/,
        replacement: fileURLToPath(new URL("./src/testing/index.ts", import.meta.url)),
      },
    ],
  },
  test: {
    // Prints what the torture tests did (kills, zombies, restarts, runs) after the run; shares
    // the shape of a migrated PostgreSQL schema between files (test/helpers/postgres-reuse.ts).
    globalSetup: ["test/helpers/torture-summary.ts", "test/helpers/postgres-shape-dir.ts"],
    testTimeout: 120_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Three test files at once even on a 2-core machine (vitest's default there is one): most
    // files wait on fsync, timers, PostgreSQL or child processes rather than on the CPU, and
    // no test judges by wall-clock time. Measured on 2 cores (2026-12-07): the default run took
    // 683-787 s with two, 519 s with three (summed file time about the same, 1,281 s).
    maxWorkers: 3,
    projects: [
      {
        extends: true,
        test: {
          name: "default",
          include: ["src/**/*.test.ts", "test/**/*.test.ts", "examples/**/*.test.ts"],
          exclude: [...configDefaults.exclude, RESTARTS_POSTGRES],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "serial",
          include: [RESTARTS_POSTGRES],
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
