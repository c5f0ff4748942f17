// checkReplay's timeoutMs armed one setTimeout: past its 2^31-1 ms limit (about 24.8 days)
// Node fires it after 1 ms, so a generous timeout reported every run whose replay took a
// moment as "did not finish"; NaN, a negative or a non-number timeout did the same. A
// timeout that long now waits as asked (a chain of timers), and one that is no positive
// number is refused, naming timeoutMs.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import { useHarness } from "./helpers/engines.js";

const harness = useHarness("sqlite");

/** The workflow's own work before its call: real time the replay takes too. */
const moment = () => new Promise((r) => setTimeout(r, 30));

const wf = workflow({ name: "slow-replay", version: "1" }, async (ctx) => {
  await moment();
  return ctx.step("a", () => 1);
});

describe("checkReplay's timeoutMs", () => {
  it("a timeout past 2^31-1 ms lets a replay that takes a moment finish", async () => {
    const h = harness();
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "slow" });
    expect(await run.result()).toBe(1);
    const res = await checkReplay({ store: h.store(), workflows: [wf], timeoutMs: 2 ** 31 + 1 });
    expect(res.map((r) => [r.runId, r.verdict, r.detail])).toEqual([
      ["slow", "ok", "replayed to completion"],
    ]);
  });

  it("a timeout that is no positive number is refused, naming timeoutMs", async () => {
    const h = harness();
    for (const bad of [Number.NaN, -1, 0, "10s" as unknown as number]) {
      await expect(
        checkReplay({ store: h.store(), workflows: [wf], timeoutMs: bad }),
      ).rejects.toThrow(/checkReplay: timeoutMs must be a positive number of milliseconds/);
    }
  });
});
