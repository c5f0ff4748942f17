// crashSweep names an execution a store error stopped (the storage failed, not the
// workflow): the run, the crash point, the error, and what to do. Before, it was reported
// as a difference of the workflow's ("the run ended running (CrashSweepError: ...) instead
// of completed; its output is undefined instead of 2"), the store's error name lost; and an
// undisturbed run a store error stopped was told to send the events it waits for.

import { describe, expect, it } from "vitest";
import { type Store, StoreError, sqliteStore, workflow } from "../src/index.js";
import { crashSweep } from "../src/testing/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const wf = workflow({ name: "sweep-store", version: "1" }, async (ctx) => {
  const a = await ctx.step("a", () => 1);
  return ctx.step("b", () => a + 1);
});

/** `store`, but every getRun rejects with a StoreError (as a store whose database went). */
function getRunFails(store: Store): Store {
  return new Proxy(store, {
    get(target, key) {
      if (key === "getRun") {
        return () => Promise.reject(new StoreError("database disk image is malformed (test)"));
      }
      const v = Reflect.get(target, key);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

/** Storage per execution as the sweep's default; the `failing`-th execution's store fails. */
function storageFailingAt(failing: number) {
  let executions = 0;
  return () => {
    const db = tempDbPath();
    const n = ++executions;
    return {
      store: () => (n === failing ? getRunFails(sqliteStore(db.path)) : sqliteStore(db.path)),
      cleanup: db.cleanup,
    };
  };
}

describe("crashSweep: an execution a store error stopped", () => {
  it("is named with its run, its crash point, the error and what to do", async () => {
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      runId: "swept",
      // The undisturbed run, then a crash per boundary: the third execution is the second
      // boundary's.
      storage: storageFailingAt(3),
    });
    const second = res.boundaries[1]!;
    expect(second.driveError).toMatchObject({ name: "StoreError" });
    expect(res.failures).toHaveLength(1);
    const [failure] = res.failures;
    expect(failure).toContain(`crash ${second.boundary.label} (run "swept")`);
    expect(failure).toContain("StoreError: database disk image is malformed (test)");
    expect(failure).toContain("a store error stopped the execution");
    expect(failure).toContain("sweep again");
    expect(failure).not.toContain("instead of");
  });

  it("in the undisturbed run rejects the sweep naming the store error, not missing events", async () => {
    const sweep = crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      runId: "swept",
      storage: storageFailingAt(1),
    });
    await expect(sweep).rejects.toThrow(
      /the undisturbed run "swept": a store error stopped the execution.*StoreError: database disk image is malformed \(test\).*sweep again/,
    );
    await expect(sweep).rejects.not.toThrow(/send the events/);
  });
});
