// Found by triaging the generative replay test's ip-sqlite soak
// (test/replay-generative.test.ts, CAIRN_SOAK=1 CAIRN_GEN_MODES=ip-sqlite): each case is a
// standalone reduction of a failing generated program, on both backends.

import { describe, expect, it } from "vitest";
import { realClock, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a recorded outcome of a call made after a timer is not handed over inside that timer's cascade", async () => {
    // Generative finding (ip-sqlite:700636): after `await setTimeout(...)` the workflow
    // races code that settles in a few microtasks against a step. The first run's step
    // result arrives from the store, long after the code won; a replay handed the recorded
    // result over in a microtask of the very cascade the call was made in, so the step
    // won the race instead.
    const h = harness();
    const seen: string[] = [];
    const wf = workflow({ name: "late-race", version: "1" }, async (ctx) => {
      await delay(1);
      const quick = (async () => {
        for (let i = 0; i < 3; i++) await null;
        return "code";
      })();
      const won = await Promise.race([
        quick,
        ctx.step("slow", async () => {
          await delay(20);
          return "step";
        }),
      ]);
      seen.push(won);
      // Forces a replay: the run is released here and executed again from its journal.
      await ctx.waitForEvent("go");
      return won;
    });
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go");
    await run.result();
    expect(seen).toEqual(["code", "code"]);
  });
});
