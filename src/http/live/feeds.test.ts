// A run's live feed reads the run before what it holds: a status it reports never runs ahead
// of the steps recorded before it. Read together (on PostgreSQL, separate connections), a
// feed once said "completed" before the step recorded just before the completion.

import { describe, expect, it } from "vitest";
import type { Engine } from "../../index.js";
import { runFeed } from "./feeds.js";

describe("runFeed", () => {
  it("reads the run first, and its steps and events only once the run has been read", async () => {
    const calls: string[] = [];
    let runRead!: () => void;
    const engine = {
      getRun: () => {
        calls.push("getRun");
        return new Promise((resolve) => {
          runRead = () => resolve(undefined);
        });
      },
      getSteps: async () => {
        calls.push("getSteps");
        return [];
      },
      listEvents: async () => {
        calls.push("listEvents");
        return [];
      },
    } as unknown as Engine;
    const reading = runFeed(engine, "r1").read();
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual(["getRun"]);
    runRead();
    await reading;
    expect(calls).toEqual(["getRun", "getSteps", "listEvents"]);
  });
});
