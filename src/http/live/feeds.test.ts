// A run's live feed reads the run before what it holds: a status it reports never runs ahead
// of the steps recorded before it. Read together (on PostgreSQL, separate connections), a
// feed once said "completed" before the step recorded just before the completion.

import { describe, expect, it } from "vitest";
import type { Engine } from "../../index.js";
import { runFeed } from "./feeds.js";

const RUN = {
  id: "r1",
  workflow: "w",
  version: "1",
  status: "running",
  input: null,
  budget: { limit: {}, spent: {} },
  createdAt: new Date(0),
  updatedAt: new Date(0),
};

describe("runFeed", () => {
  it("reads the run first, and its steps and events only once the run has been read", async () => {
    const calls: string[] = [];
    let runRead!: () => void;
    const engine = {
      getRun: () => {
        calls.push("getRun");
        return new Promise((resolve) => {
          runRead = () => resolve(RUN);
        });
      },
      readSteps: async () => {
        calls.push("readSteps");
        return { steps: [] };
      },
      readEvents: async () => {
        calls.push("readEvents");
        return { events: [] };
      },
    } as unknown as Engine;
    const reading = runFeed(engine, "r1").read();
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual(["getRun"]);
    runRead();
    await reading;
    expect(calls).toEqual(["getRun", "readSteps", "readEvents"]);
  });
});
