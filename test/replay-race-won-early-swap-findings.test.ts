// MENDED: code that raced a step against a timer of its own, and made its call in the step's
// cascade on the first run (the step won), runs late and early on a replay whose timer wins
// first: before an earlier recorded call of the same name is made. It made the name's first
// call and took that call's record and value ("b got a"); the replay was refused only
// afterwards, when the other call came. Here the hand-overs are held for A's missing x (its
// own work is slower on the replay) when B's x takes A's record: the replay now keeps holding
// while a later call of the name, recorded inside a cascade, is still to come and the
// workflow's own work may make it (Context.doubtfulCall); A's call then comes before B's
// value is handed over and is refused. (Made before A's record's window, B's call is refused
// at once: test/replay-race-early-before-window-findings.test.ts.)

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { replayAtGo } from "./helpers/replay-at-go.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readSelf = () => readFile(new URL(import.meta.url), "utf8");

describe.each(BACKENDS)("%s: a replay's race won early by a timer", (backend) => {
  const harness = useHarness(backend);

  it("the early call does not take an earlier call's record", async () => {
    const h = harness();
    let firstRun = true;
    const got: string[] = [];
    const wf = workflow({ name: "race-won-early", version: "1" }, async (ctx: WorkflowContext) => {
      const x = async (id: string) => {
        const v = await ctx.step("x", () => delay(5).then(() => id));
        got.push(`${id}=${v}`);
      };
      const ownWork = () => (firstRun ? delay(0) : readSelf().then(() => delay(1000)));
      await Promise.all([
        (async () => {
          await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork()]);
          await x("a");
        })(),
        (async () => {
          const timer = delay(firstRun ? 2000 : 100);
          await Promise.race([ctx.step("q", () => delay(400).then(() => "q")), timer]);
          await x("b");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return "done";
    });
    const out = await replayAtGo(h.engine([wf], { clock: realClock }), wf, {
      flip: () => {
        expect(got).toEqual(["a=a", "b=b"]);
        got.length = 0;
        firstRun = false;
      },
    });
    expect(got.filter((g) => g.split("=")[0] !== g.split("=")[1])).toEqual([]);
    expect(["done", "NonDeterminismError"]).toContain(out);
  }, 20_000);
});
