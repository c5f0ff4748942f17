import { configDefaults, defineConfig } from "vitest/config";

// test/pg-restart.test.ts restarts the PostgreSQL server, which drops every connection on
// it: it runs in a project of its own whose group (sequence.groupOrder) starts only after
// every other test file has finished. `vitest run` (npm test) runs both, in that order.
const RESTARTS_POSTGRES = "test/pg-restart.test.ts";

export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 60_000,
    pool: "forks",
    projects: [
      {
        extends: true,
        test: {
          name: "default",
          include: ["src/**/*.test.ts", "test/**/*.test.ts"],
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
