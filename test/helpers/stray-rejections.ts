// Unhandled rejections collected per test, ahead of vitest's own listener (which would report
// one as an error of the whole file): a test asserts there were none, or which.

import { afterEach, beforeEach } from "vitest";

/** The unhandled rejections of the running test (emptied before each test). */
export function strayRejections(): unknown[] {
  const stray: unknown[] = [];
  const onRejection = (err: unknown) => stray.push(err);
  beforeEach(() => {
    stray.length = 0;
    process.prependListener("unhandledRejection", onRejection);
  });
  afterEach(() => {
    process.off("unhandledRejection", onRejection);
  });
  return stray;
}
