// Steering runs with children over the HTTP API, as an operator would: each test failed before its mend.

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { FatalError, RunConflictError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

const TOKEN = "steer-token-steer-token-steer-tok";
const auth = { authorization: `Bearer ${TOKEN}` };

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a failed child of a canceled parent is not resumed: it would work for nobody (409 naming the parent)", async () => {
    const h = harness();
    let childRuns = 0;
    const child = workflow({ name: "steer-kid", version: "1" }, async (ctx) => {
      await ctx.step("work", () => {
        childRuns++;
        if (childRuns === 1) throw new FatalError("broken the first time");
        return "done";
      });
    });
    const parent = workflow({ name: "steer-parent", version: "1" }, async (ctx) => {
      await ctx.child("k", child, undefined).catch(() => undefined);
      await ctx.waitForEvent("go-on");
    });
    const e = h.engine([parent, child]);
    const app = createHttpApp({ engine: e, token: TOKEN });
    await e.start(parent, undefined, { id: "hp" });
    await until(async () => {
      const [p, k] = [await e.getRun("hp"), await e.getRun("hp/k")];
      return p?.status === "waiting" && p.waitingFor?.includes("go-on") && k?.status === "failed";
    }, "hp waits for go-on, hp/k failed");

    const canceled = await call(app.fetch, "POST", "/api/runs/hp/cancel", {
      body: { reason: "operator stop" },
      headers: auth,
    });
    expect(canceled.status).toBe(200);

    const resumed = await call<{ error: { code: string; message: string } }>(
      app.fetch,
      "POST",
      "/api/runs/hp%2Fk/resume",
      { headers: auth },
    );
    expect(resumed.status).toBe(409);
    expect(resumed.body.error.message).toMatch(/parent run "hp" was canceled/);
    await expect(e.resume("hp/k")).rejects.toThrow(RunConflictError);
    const kid = await e.getRun("hp/k");
    expect(kid?.status).toBe("failed");
    expect(childRuns).toBe(1);
  });
});
