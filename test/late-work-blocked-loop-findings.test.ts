// A replay whose event loop was blocked (a long synchronous stretch: another run's CPU-
// bound code, a GC pause, a loaded machine) while workflow code read a file outside any
// step. The generative replay test's reference run of ip-sqlite:1000149 failed so under a
// load average of 30: the journal's next call was judged missing as soon as the file read
// was a second old, while the read's completion still waited behind the block.

import { readFile } from "node:fs/promises";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { afterEach, expect, it } from "vitest";
import { createEngine, FatalError, sqliteStore, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { outsideWorkflow } from "../src/workflow/call-scope.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function spin(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {}
}

it("a blocked event loop during a replay's file read is no divergence", async () => {
  let fixed = false;
  let replaying = false;
  const wf = workflow({ name: "reads-a-file", version: "1" }, async (ctx) => {
    const read = readFile(fileURLToPath(import.meta.url));
    // On the replay, the loop blocks for longer than a file read's grace right after it
    // began, by work that is not this run's (as another run's would be).
    if (replaying) {
      replaying = false;
      outsideWorkflow(() => {
        const hog = setInterval(() => spin(700), 1);
        setTimeout(() => clearInterval(hog), 4_000);
      });
    }
    // The first time, the read is long done (more than its grace) when "a" answers, so "b"
    // is recorded as a call that must follow "a" at once.
    await Promise.all([ctx.step("a", () => delay(1_100, 1)), read]);
    await ctx.step("b", () => 2);
    await ctx.step("c", () => {
      if (!fixed) throw new FatalError("not yet");
      return 3;
    });
    return "done";
  });
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  const engine = createEngine({ store: sqliteStore(db.path), workflows: [wf], pollIntervalMs: 10 });
  cleanups.push(() => engine.close());
  await engine.start(wf, undefined, { id: "r1" });
  await waitForStatus(engine, "r1", "failed");
  fixed = true;
  replaying = true;
  await engine.resume("r1");
  const run = await waitForStatus(engine, "r1", ["completed", "failed"]);
  expect(run.error?.message ?? "").toBe("");
  expect(run.status).toBe("completed");
});
