// A workflow whose run fails while a step body of it runs on, deaf to its abort: step "slow"
// waits for `latch` (opened by the test, and by the cleanups), step "bad" fails once it has
// begun. For the held-runs findings: the run is released failed while "slow" still runs.

import { workflow } from "../../src/index.js";
import type { Cleanups } from "./lifecycle.js";
import { gate } from "./store-verbs.js";

export function deafFailingRun(name: string, cleanups: Cleanups) {
  const latch = gate();
  cleanups.push(latch.open);
  const began = gate();
  /** begun: "slow" bodies begun; running, most: at once now and at most; bad: "bad"'s attempts. */
  const seen = { begun: 0, running: 0, most: 0, bad: 0 };
  const wf = workflow({ name, version: "1" }, async (ctx) =>
    Promise.all([
      ctx.step("slow", async () => {
        seen.begun++;
        began.open();
        seen.running++;
        seen.most = Math.max(seen.most, seen.running);
        try {
          await latch.opened; // deaf to its signal
        } finally {
          seen.running--;
        }
        return "slow";
      }),
      ctx.step(
        "bad",
        async () => {
          await began.opened;
          seen.bad++;
          if (seen.bad === 1) throw new Error("bad input");
          return "fixed";
        },
        { retry: { maxAttempts: 1 } },
      ),
    ]),
  );
  return { wf, seen, latch };
}
