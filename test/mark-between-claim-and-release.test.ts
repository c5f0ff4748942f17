// h17: a keyless engine's run whose store another connection marks encrypted between the
// run's claim and its release (h3's clone, 4eac07f: the SQLite release reads the mark in its
// read of the run's row). The release of its plain output is refused, nothing of it written,
// and the run is paused with the documented reason; a key-holding engine resumes it. Both
// the run's status/reason and the journal are compared with main by running this file there.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, encryptedStore, sqliteStore, workflow } from "../src/index.js";
import { k1 } from "./helpers/plain-records.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("the mark set by another connection between claim and release", () => {
  it("a keyless engine's plain release is refused and the run paused; a keyed engine resumes it", async () => {
    let open!: () => void;
    const gate = new Promise<void>((r) => {
      open = r;
    });
    let begun!: () => void;
    const started = new Promise<void>((r) => {
      begun = r;
    });
    let bodies = 0;
    const wf = workflow({ name: "mark", version: "1" }, async (ctx) => {
      await ctx.step("wait", () => {
        bodies++;
        return null;
      });
      // The workflow's own wait (no cairn call): the run stays claimed meanwhile.
      begun();
      await gate;
      return "SECRET";
    });
    const { path, cleanup } = tempDbPath();
    cleanups.push(cleanup);
    const keyless = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 5 });
    cleanups.push(() => keyless.close());
    await keyless.start(wf, undefined, { id: "m1" });
    await started;
    // The step's record is written (the store unmarked yet) before the mark.
    for (let i = 0; i < 1000 && (await keyless.getSteps("m1")).length === 0; i++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    const keyed = encryptedStore(sqliteStore(path), { keys: [k1] });
    await keyed.open({ clock: { now: () => Date.now(), system: true } as never });
    await keyed.close();
    open();
    let run = await keyless.getRun("m1");
    for (let i = 0; i < 1000 && run?.status === "running"; i++) {
      await new Promise((r) => setTimeout(r, 5));
      run = await keyless.getRun("m1");
    }
    expect(run?.status).toBe("paused");
    expect(run?.reason).toMatch(/marked encrypted/);
    // The release (its output) was refused, not a step record.
    expect(run?.reason).toMatch(/output/);
    expect(run?.output).toBeUndefined();
    await keyless.close();
    const e2 = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k1] }),
      workflows: [wf],
      pollIntervalMs: 5,
    });
    cleanups.push(() => e2.close());
    await e2.resume("m1");
    expect(await e2.handle("m1").result()).toBe("SECRET");
    expect(bodies).toBe(1);
    expect((await e2.getSteps("m1")).map((s) => s.key)).toEqual(["wait"]);
  });
});
