// A run's history in time order (`temporal workflow show`) was not to be had: `cairn show`
// gives the calls by call order and only the events no wait consumed, so an event that was
// delivered (its payload, which wait took it, when) was nowhere in the CLI. `cairn events
// <id>` now prints the time line: created, each call begun, each failed attempt with its
// error, each call completed with its result, every event received (payload, consumer),
// and the run's end.

import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

let tries = 0;
const flow = workflow({ name: "flow", version: "1" }, async (ctx) => {
  const fetched = await ctx.step(
    "fetch",
    () => {
      tries += 1;
      if (tries === 1) throw new Error("flaky upstream");
      return { rows: 3 };
    },
    { retry: { initialDelay: "10ms", jitter: false } },
  );
  const go = await ctx.waitForEvent<{ by: string }>("go");
  return { rows: fetched.rows, by: go.timedOut ? null : go.payload.by };
});

interface Entry {
  what: string;
  key?: string;
  attempt?: number;
  error?: { message: string };
  payload?: unknown;
  consumedBy?: string;
  result?: unknown;
}

describe("cairn events", () => {
  const dir = tempDir("cairn-events-");
  const path = join(dir.dir, "cairn.db");
  const store = ["--store", `sqlite:${path}`];
  afterAll(() => dir.cleanup());

  it("prints the run's history in order, with the events it received", async () => {
    const engine = createEngine({
      store: sqliteStore(path),
      workflows: [flow],
      pollIntervalMs: 20,
    });
    try {
      const run = await engine.start(flow, undefined, { id: "f1" });
      await until(async () => (await engine.getRun("f1"))?.status === "waiting", "waiting");
      await engine.sendEvent("f1", "unrelated", { note: "nobody waits for this" });
      await engine.sendEvent("f1", "go", { by: "ann" });
      await run.result();
    } finally {
      await engine.close();
    }

    const json = await cairn(["events", "f1", "--json", ...store]);
    expect(json.code, json.stderr).toBe(0);
    const { run, history } = JSON.parse(json.stdout) as { run: unknown; history: Entry[] };
    expect(run).toEqual({ id: "f1", workflow: "flow", version: "1", status: "completed" });
    expect(history.map((e) => `${e.what} ${e.key ?? ""}`.trim())).toEqual([
      "run created",
      "attempt failed fetch",
      "step completed fetch",
      "wait begun go",
      "event received unrelated",
      "event received go",
      "wait completed go",
      "run completed",
    ]);
    expect(history[1]).toMatchObject({ attempt: 1, error: { message: "flaky upstream" } });
    expect(history[2]).toMatchObject({ result: { rows: 3 } });
    expect(history[4]).toMatchObject({ payload: { note: "nobody waits for this" } });
    expect(history[4]!.consumedBy).toBeUndefined();
    expect(history[5]).toMatchObject({ payload: { by: "ann" }, consumedBy: "go" });
    expect(history[7]).toMatchObject({ result: { rows: 3, by: "ann" } });

    const text = await cairn(["events", "f1", ...store]);
    expect(text.code).toBe(0);
    const lines = text.stdout.split("\n");
    expect(lines[0]).toBe('History of run "f1" (flow@1, completed):');
    expect(text.stdout).toMatch(/attempt failed +fetch +attempt 1: Error: flaky upstream/);
    expect(text.stdout).toMatch(
      /event received +unrelated +seq \d+, not consumed yet; payload \{"note":"nobody waits for this"\}/,
    );
    expect(text.stdout).toMatch(
      /event received +go +seq \d+, consumed by "go"; payload \{"by":"ann"\}/,
    );
    expect(text.stdout).toMatch(/run completed +- +\{"rows":3,"by":"ann"\}/);
  });

  it("an unknown run is an error naming it", async () => {
    expectFailure(await cairn(["events", "nope", ...store]), 1, /Run "nope" does not exist/);
  });
});
