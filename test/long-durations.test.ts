// Durations longer than setTimeout can hold (2^31-1 ms, about 24.8 days), end to end on the
// real clock: Node turns such a delay into 1 ms, so a "25d" step timeout fired at once and a
// 30-day sleep waited on in process re-armed its timer every millisecond. Timers do not
// depend on the backend, so this runs on SQLite only.

import { describe, expect, it } from "vitest";
import { type Clock, realClock, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** The step bodies below take this long (real time): long enough for a timer that fires
 *  after 1 ms to fire many times, which is what the assertions count. */
const WORK_MS = 60;

const work = () => new Promise<string>((r) => setTimeout(() => r("done"), WORK_MS));

describe("durations past setTimeout's limit", () => {
  const harness = useHarness("sqlite");

  it('a step with timeout "25d" is not timed out by a body that takes a moment', async () => {
    const h = harness();
    const wf = workflow({ name: "long-timeout", version: "1" }, async (ctx) =>
      ctx.step("slow", work, { timeout: "25d", retry: { maxAttempts: 1 } }),
    );
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await expect(run.result()).resolves.toBe("done");
  });

  it("a 30-day sleep blocked in process arms its timer once instead of every millisecond", async () => {
    const h = harness();
    let sleeps = 0;
    const counting: Clock = {
      now: () => realClock.now(),
      sleep(ms, signal) {
        sleeps++;
        return realClock.sleep(ms, signal);
      },
    };
    const wf = workflow({ name: "long-sleep", version: "1" }, async (ctx) => {
      // The step keeps the execution active, so the sleeping branch waits in process.
      await Promise.all([ctx.sleep("month", "30d"), ctx.step("work", work)]);
    });
    const e = h.engine([wf], { clock: counting });
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run suspends");
    const steps = await e.getSteps(run.id);
    expect(steps.find((s) => s.key === "work")?.status).toBe("completed");
    // One sleep for the month, armed once while "work" ran (the bug: one per millisecond).
    expect(sleeps).toBe(1);
  });
});

describe.each(BACKENDS)("durations too long to schedule (%s)", (backend) => {
  const harness = useHarness(backend);

  it("a sleep of 1e19 ms, or until past a Date's range, fails the run once, naming the call", async () => {
    const h = harness();
    let executions = 0;
    const wf = workflow({ name: "aeons", version: "1" }, async (ctx, kind: string) => {
      executions++;
      if (kind === "sleep") await ctx.sleep("forever", 1e19);
      else if (kind === "days") await ctx.sleep("forever", "999999999999d");
      else await ctx.sleepUntil("forever", 1e19);
    });
    const e = h.engine([wf]);
    for (const [kind, message] of [
      [
        "sleep",
        /ctx.sleep\("forever"\) duration: 10000000000000000000 is longer than 100,000 years/,
      ],
      ["days", /ctx.sleep\("forever"\) duration: "999999999999d" is longer than 100,000 years/],
      [
        "until",
        /ctx.sleepUntil\("forever"\): 10000000000000000000 ms is outside the range of a Date/,
      ],
    ] as const) {
      executions = 0;
      const run = await e.start(wf, kind);
      await expect(run.result()).rejects.toThrow(message);
      // Before: PostgreSQL refused the wake time, the release failed, and the run was
      // claimed and executed again, over and over.
      expect(executions, kind).toBe(1);
    }
  });
});
