// An approval's answer belongs to the request the approver saw. A replay whose code asks
// another request under the same key (code deployed between the asking and the answer, a
// request built from Date.now() or a module's state) was handed the recorded answer, or
// answered with the stored row's: "deploy staging" approved, "drop production" performed.
// The asking's intent now holds a digest of the request as handed in, and a call that asks
// another fails the run with NonDeterminismError; the same request (an Error made at another
// place, the object changed after the call) replays as before.

import { describe, expect, it } from "vitest";
import { NonDeterminismError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** What the deployed code asks: the tests change it between executions. */
let asking: unknown = { action: "deploy staging" };
const performed: string[] = [];

const guarded = workflow({ name: "guarded-deploy", version: "1" }, async (ctx) => {
  const request = asking;
  const decision = await ctx.approval("go", { request });
  // Changing the object after the call changes nothing the call asked.
  if (request && typeof request === "object") (request as { late?: true }).late = true;
  await ctx.waitForEvent("proceed");
  if (decision.approved) performed.push(JSON.stringify(asking));
  return decision.approved;
});

function withStack(message: string, stack: string): Error {
  const e = new Error(message);
  e.stack = stack;
  return e;
}

describe.each(BACKENDS)("an approval replayed with another request on %s", (backend) => {
  const harness = useHarness(backend);

  it("answered: a replay that asks another request fails the run, nothing is performed", async () => {
    const h = harness();
    const e = h.engine([guarded]);
    asking = { action: "deploy staging" };
    performed.length = 0;
    await e.start(guarded, undefined, { id: "answered" });
    await until(async () => (await e.getRun("answered"))?.status === "waiting", "asked");
    await e.approve("answered", "go", { by: "alice" });
    await until(
      async () => (await e.getRun("answered"))?.waitingFor?.includes("proceed") === true,
      "waits for proceed",
    );
    asking = { action: "drop production" };
    await e.sendEvent("answered", "proceed", null);
    await expect(e.handle("answered").result()).rejects.toThrow(NonDeterminismError);
    await expect(e.handle("answered").result()).rejects.toThrow(
      /key "go": the journal recorded approval "go" asked with another request than the code now asks \(its recorded outcome/,
    );
    expect(performed).toEqual([]);
  });

  it("waiting: an answer to the stored request is not handed to another request", async () => {
    const h = harness();
    const e = h.engine([guarded]);
    asking = { action: "deploy staging" };
    performed.length = 0;
    await e.start(guarded, undefined, { id: "waiting" });
    await until(async () => (await e.getRun("waiting"))?.status === "waiting", "asked");
    asking = { action: "drop production" };
    // Alice approves what she is shown: the stored request.
    const [shown] = await e.listApprovals("waiting");
    expect(shown?.request).toEqual({ action: "deploy staging" });
    await e.approve("waiting", "go", { by: "alice" });
    await expect(e.handle("waiting").result()).rejects.toThrow(
      /key "go": the journal recorded approval "go" asked with another request than the code now asks \(an answer to it/,
    );
    expect(performed).toEqual([]);
  });

  it("the same request replays: an Error made elsewhere, the object changed after the call", async () => {
    const h = harness();
    const e = h.engine([guarded]);
    const failure = withStack(
      "tests failed",
      "Error: tests failed\n    at /srv/release-1/a.js:1:1",
    );
    asking = { action: "deploy staging", failure };
    performed.length = 0;
    await e.start(guarded, undefined, { id: "same" });
    await until(async () => (await e.getRun("same"))?.status === "waiting", "asked");
    await e.approve("same", "go", { by: "alice" });
    await until(
      async () => (await e.getRun("same"))?.waitingFor?.includes("proceed") === true,
      "waits for proceed",
    );
    asking = {
      action: "deploy staging",
      failure: withStack("tests failed", "Error: tests failed\n    at /srv/release-2/a.js:9:9"),
    };
    await e.sendEvent("same", "proceed", null);
    await expect(e.handle("same").result()).resolves.toBe(true);
    expect(performed).toHaveLength(1);
  });

  it("an Error whose status changed is another request", async () => {
    const h = harness();
    const e = h.engine([guarded]);
    const failed = (status: number) => Object.assign(new Error("deploy failed"), { status });
    asking = { action: "roll back", failure: failed(503) };
    await e.start(guarded, undefined, { id: "status" });
    await until(async () => (await e.getRun("status"))?.status === "waiting", "asked");
    asking = { action: "roll back", failure: failed(404) };
    await e.approve("status", "go", { by: "alice" });
    await expect(e.handle("status").result()).rejects.toThrow(NonDeterminismError);
  });
});
