// a step waiting out a retry backoff long enough to release its run (past
// inProcessRetryMs) was shown as "sleeping until T" by `cairn runs`/`cairn show`, the HTTP
// run view and the dashboard, as if the workflow had called ctx.sleep. The release now
// says which step waits and which attempt starts when (the run's reason), and each view
// shows that.

import { describe, expect, it } from "vitest";
import { explainRun } from "../src/cli/explain-run.js";
import { toRunView } from "../src/engine/views.js";
import { reasonCell } from "../src/http/ui/runs-page.js";
import { workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const flaky = workflow({ name: "flaky", version: "1" }, async (ctx) =>
  ctx.step(
    "fetch",
    async () => {
      throw new Error("upstream down");
    },
    { retry: { maxAttempts: 3, initialDelay: "1h", jitter: false } },
  ),
);
const sleeper = workflow({ name: "sleeper", version: "1" }, async (ctx) => {
  await ctx.sleep("nap", "1h");
  return 1;
});

for (const backend of BACKENDS) {
  describe(`a run released for a retry backoff (${backend})`, () => {
    const harness = useHarness(backend);

    it("says which step waits, for which attempt and until when; a sleep still sleeps", async () => {
      const h = harness();
      const e = h.engine([flaky, sleeper]);
      await e.start(flaky, undefined, { id: "f1" });
      await e.start(sleeper, undefined, { id: "s1" });
      await until(async () => (await e.getRun("f1"))?.status === "waiting", "f1 backs off");
      await until(async () => (await e.getRun("s1"))?.status === "waiting", "s1 sleeps");
      const run = (await e.getRun("f1"))!;
      const at = run.wakeAt!.toISOString();
      expect(run.reason).toBe(`retry backoff of step "fetch": attempt 2 at ${at}`);
      const now = new Date(h.clock.now());
      expect(explainRun(run, [], now)).toBe(`retry backoff of step "fetch": attempt 2 at ${at}`);
      const cell = String(reasonCell(JSON.parse(JSON.stringify(run)), now.getTime()));
      expect(cell).toContain("retry backoff");
      expect(cell).toContain("&quot;fetch&quot;: attempt 2");
      expect(cell).not.toContain("sleeping");

      const slept = (await e.getRun("s1"))!;
      expect(slept.reason).toBeUndefined();
      expect(explainRun(slept, [], now)).toBe(`sleeping until ${slept.wakeAt!.toISOString()}`);
      expect(String(reasonCell(JSON.parse(JSON.stringify(slept)), now.getTime()))).toContain(
        "sleeping",
      );

      // The claim that ends the backoff keeps the reason in the store: no view of a run not
      // waiting shows it.
      const store = h.store();
      await store.open({ clock: h.clock });
      const rec = (await store.getRun("f1"))!;
      expect(rec.reason).toContain("retry backoff");
      expect(toRunView({ ...rec, status: "running" }).reason).toBeUndefined();
      expect(toRunView({ ...rec, status: "pending" }).reason).toBeUndefined();
      await store.close();

      // The next backoff says the next attempt.
      await h.clock.advance(60 * 60 * 1000);
      await until(async () => {
        const r = await e.getRun("f1");
        return r?.status === "waiting" && r.reason?.includes("attempt 3") === true;
      }, "the second backoff");
    });
  });
}
