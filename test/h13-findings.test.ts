// Findings of an adversarial review of close() always ending and of runs held for step
// bodies (h13). Each test failed on the code it was written against, and stays as the
// regression test of its mend.

import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach, lifecycleLines } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { gate } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();

describe.each(BACKENDS)("%s: close() past its grace with a step still running", (backend) => {
  // Before: close() stopped the execution (stopWithoutWriting) and its end was reported as a
  // "lease-lost" line, "another worker has it", while the run stayed leased to this worker
  // and no other worker could have it (cairn worker printed it on every such SIGTERM).
  it("does not report the run's lease lost; it says the run stays leased here", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const latch = gate();
    cleanups.push(latch.open);
    const began = gate();
    const wf = workflow({ name: "deaf", version: "1" }, async (ctx) =>
      ctx.step("slow", async () => {
        began.open();
        await latch.opened; // deaf to its signal
        return "slow";
      }),
    );
    const lines = lifecycleLines();
    const problems: string[] = [];
    const engine = createEngine({
      store: makeStore(),
      workflows: [wf],
      clock: createVirtualClock(),
      pollIntervalMs: 10,
      closeGraceMs: 50,
      abortGraceMs: 20,
      logger: { ...lines.logger, warn: (_f: object, m: string) => problems.push(m) },
    });
    cleanups.push(() => engine.close());
    await engine.start(wf, undefined, { id: "r" });
    await began.opened;
    await until(() => lines.events.some((e) => e.event === "claimed"), "claimed");
    await engine.close();
    expect(lines.events.filter((e) => e.runId === "r").map((e) => e.event)).toEqual(["claimed"]);
    expect(problems.some((m) => m.includes(`run "r" stays leased to this worker`))).toBe(true);
  });
});
