// A vitest reporter for CI: writes the run's unhandled errors (an error no test awaited,
// which fails the run although every test passed) to a file that .ci/run prints just
// before its summary line, so the error's message and where it came from are in the last
// lines of a CI log, not only in the middle of the default reporter's output.

import { writeFileSync } from "node:fs";
import type { Reporter } from "vitest/reporters";

const OUT = process.env.CAIRN_UNHANDLED_ERRORS_FILE;

type Unhandled = Parameters<NonNullable<Reporter["onTestRunEnd"]>>[1][number] & {
  VITEST_TEST_PATH?: string;
  VITEST_TEST_NAME?: string;
};

export default class UnhandledErrorsReporter implements Reporter {
  onTestRunEnd(_modules: unknown, unhandledErrors: readonly Unhandled[]): void {
    if (!OUT) return;
    const lines = unhandledErrors.map((e, i) => {
      const where = [
        e.VITEST_TEST_PATH && `in ${e.VITEST_TEST_PATH}`,
        e.VITEST_TEST_NAME && `during "${e.VITEST_TEST_NAME}"`,
      ]
        .filter(Boolean)
        .join(", ");
      const stack = (e.stack ?? "").split("\n").slice(0, 12).join("\n  ");
      return `unhandled error ${i + 1} of ${unhandledErrors.length}${where ? ` (${where})` : ""}: ${e.name ?? "Error"}: ${e.message}\n  ${stack}`;
    });
    writeFileSync(OUT, lines.length > 0 ? `${lines.join("\n")}\n` : "");
  }
}
