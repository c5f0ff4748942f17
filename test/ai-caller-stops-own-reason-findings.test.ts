// Attacks on the caller's stop read by the AI SDK itself, replayed: a streamed loop whose tool
// has a timeout of its own (timeout.toolMs), and a stop whose reason is the caller's own error.

import { describe, expect, it } from "vitest";
import { firstAndReplay, loopWorkflow } from "./helpers/ai-tool-loop.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

let n = 0;

for (const backend of BACKENDS) {
  describe(`cairn/ai: caller stops replayed, more (${backend})`, () => {
    const harness = useHarness(backend);

    it("stream with toolMs: a stop landing while a tool runs ends the replay's loop there too", async () => {
      const h = harness();
      let executions = 0;
      const { wf, outcomes, calls } = loopWorkflow(
        h,
        `stream-toolms-${++n}`,
        "stream",
        async (_s, caller) => {
          executions++;
          caller.abort();
          return "found";
        },
        { toolMs: 60_000 },
      );
      const { r } = await firstAndReplay(h, wf);
      expect(executions).toBe(1);
      expect(r.error).toBeUndefined();
      expect(outcomes[0]).toMatch(/^stopped: AbortError/);
      expect(outcomes[1]).toBe(outcomes[0]);
      expect(calls()).toBe(1);
    });

    // A stop's reason of the caller's own was recorded as FATAL under its name, which the
    // replay took for the tool's own error: it made the model call the first execution never
    // made (paid) and the loop answered where the first execution stopped.
    for (const [mode, timeout] of [
      ["generate", undefined],
      ["stream", undefined],
      ["generate", { toolMs: 60_000 }],
      ["stream", { toolMs: 60_000 }],
    ] as const) {
      it(`${mode}${timeout ? " with toolMs" : ""}: a stop with a reason of the caller's own ends the replay's loop there too`, async () => {
        const h = harness();
        const { wf, outcomes, calls } = loopWorkflow(
          h,
          `own-reason-${mode}-${++n}`,
          mode,
          async (_s, caller) => {
            caller.abort(new Error("the user pressed stop"));
            return "found";
          },
          timeout,
        );
        const { r } = await firstAndReplay(h, wf);
        expect(r.error).toBeUndefined();
        expect(outcomes[0]).toBe("stopped: Error: the user pressed stop");
        expect(outcomes[1]).toBe(outcomes[0]);
        expect(calls()).toBe(1);
      });
    }
  });
}
