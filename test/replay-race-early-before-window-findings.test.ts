// A call made before its recorded window is refused before anything is handed over.
//
// Branch A makes x ("a") after step "m" and work of its own; branch B races step "q"
// against a timer of its own, then makes x ("b"). The first run: q wins, A's x is made in
// m's cascade (key x, after 2 outcomes), B's in q's (x#2, after 4). On the replay "c" (made
// after work of the workflow's own, slower now) holds every hand-over back, B's timer wins,
// and B makes x after 0 outcomes: the name's first call, it took A's record, and got "a"
// once m was handed over (A's own work was not done then: nothing was missing in m's
// cascade); A's call came later and was refused, after the wrong value. A call recorded
// inside the cascade after W outcomes is made by code that outcome set running, so never
// before W outcomes in a replay of the same program: made earlier, it is code whose own
// timer or I/O won a race the first run's outcome won (Context.matchRecord).
// Deterministic: B's timer is 100 ms, c's call comes after 1 s, A's x after 1.5 s.

import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(BACKENDS)("%s: a call made before its recorded window", (backend) => {
  const harness = useHarness(backend);

  it("is refused, and no branch gets the other's value", async () => {
    const h = harness();
    let firstRun = true;
    const got: string[] = [];
    const wf = workflow({ name: "before-window", version: "1" }, async (ctx: WorkflowContext) => {
      const x = async (id: string) => {
        const v = await ctx.step("x", () => delay(5).then(() => id));
        got.push(`${id}=${v}`);
      };
      await Promise.all([
        (async () => {
          await delay(firstRun ? 0 : 1000);
          await ctx.step("c", () => "c");
        })(),
        (async () => {
          await Promise.all([
            ctx.step("m", () => delay(50).then(() => "m")),
            delay(firstRun ? 0 : 1500),
          ]);
          await x("a");
        })(),
        (async () => {
          // The first run's side never settles: no timer of its own keeps it from suspending.
          const timer = firstRun ? new Promise(() => {}) : delay(100);
          await Promise.race([ctx.step("q", () => delay(400).then(() => "q")), timer]);
          await x("b");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return "done";
    });
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await until(
      async () => ["waiting", "failed"].includes((await e.getRun(run.id))?.status ?? ""),
      "the first run waits for go",
    );
    expect((await e.getRun(run.id))?.status).toBe("waiting");
    expect(got).toEqual(["a=a", "b=b"]);
    got.length = 0;
    firstRun = false;
    await e.sendEvent(run.id, "go");
    const err = await run.result().then(
      () => undefined,
      (error: Error) => error,
    );
    expect(got.filter((g) => g.split("=")[0] !== g.split("=")[1])).toEqual([]);
    expect(err?.name).toBe("NonDeterminismError");
    expect(err?.message).toContain('"x" (key "x") was called after 2 outcomes when recorded');
    expect(err?.message).toContain("Promise.race");
  }, 20_000);
});
