// h17: event waits on both backends, diffed between main and h3's clone (the execution's event
// readers as fields, 83a0979): events sent before and after the waits, two names, a wait
// racing a sleep, a payload read apart, waits after a crash. Outputs and journals are
// written to $H17_OUT.<backend> (when set) for a diff; checkReplay must find every run ok.

import { writeFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

const wf = workflow({ name: "events", version: "1" }, async (ctx) => {
  const out: unknown[] = [];
  out.push(await ctx.waitForEvent("early"));
  out.push(await ctx.waitForEvent("early"));
  const [x, y] = await Promise.all([ctx.waitForEvent("x"), ctx.waitForEvent("y")]);
  out.push(x, y);
  const r = await Promise.race([
    ctx.waitForEvent("late").then((e) => ["event", e]),
    ctx.sleep("nap", "1h").then(() => ["sleep"]),
  ]);
  out.push(r);
  out.push(await ctx.waitForEvent("t", { timeout: "1s" }));
  out.push(await ctx.step("s", () => "done"));
  return out;
});

function strip(v: unknown) {
  return JSON.parse(
    JSON.stringify(v, (k, x) => (/At$|^at$|Ms$|^stack$|^seq$|^duration/.test(k) ? undefined : x)),
  );
}

for (const backend of BACKENDS) {
  describe(`events (${backend})`, () => {
    const harness = useHarness(backend);
    it("waits take events in the order sent, each once; checkReplay ok", async () => {
      const h = harness();
      const engine = h.engine([wf]);
      const big = "p".repeat(70_000);
      const run = await engine.start(wf, undefined, { id: "ev" });
      await engine.sendEvent("ev", "early", { n: 1 });
      await engine.sendEvent("ev", "early", { n: 2, big });
      await engine.sendEvent("ev", "y", "y1");
      await engine.sendEvent("ev", "x", "x1");
      await engine.sendEvent("ev", "late", [1, 2]);
      for (let i = 0; i < 400; i++) {
        const r = await engine.getRun("ev");
        if (r?.status === "completed" || r?.status === "failed") break;
        if (r?.status === "waiting") await h.clock.advance(1_000);
        await new Promise((res) => setTimeout(res, 5));
      }
      const out = await run.result();
      const steps = strip(await engine.getSteps("ev"));
      const events = strip(await engine.listEvents("ev"));
      if (process.env.H17_OUT) {
        writeFileSync(
          `${process.env.H17_OUT}.${backend}`,
          JSON.stringify({ out, steps, events }, null, 1),
        );
      }
      expect((out as Array<{ payload?: { n?: number; big?: string } }>)[1]?.payload?.big).toBe(big);
      expect(strip(out).slice(0, 5)).toEqual([
        { timedOut: false, payload: { n: 1 } },
        { timedOut: false, payload: { n: 2, big } },
        { timedOut: false, payload: "x1" },
        { timedOut: false, payload: "y1" },
        ["event", { timedOut: false, payload: [1, 2] }],
      ]);
      await engine.close();
      const res = await checkReplay({ store: h.store(), workflows: [wf] });
      expect(res.map((r) => [r.runId, r.verdict, r.verdict === "ok" ? "" : r.detail])).toEqual([
        ["ev", "ok", ""],
      ]);
    });
  });
}
