// A run released failed while a step body of it still runs in worker A (deaf to its abort,
// past its grace), then resumed by hand: worker B claimed it at once and began the same
// call beside A's body (one call executing twice at the same time). Worker A already kept
// it from itself (held-runs); the store now keeps it from every other worker until the
// lease A held would have run out, as after a crash.

import { describe, expect, it } from "vitest";
import { createEngine } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { deafFailingRun } from "./helpers/deaf-run.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();
const LEASE_MS = 5_000;

describe.each(BACKENDS)("%s: a resumed run whose failed execution's body runs on", (backend) => {
  it("is not claimed by another worker before that body's lease would have run out", async () => {
    const makeStore = freshStorage(backend, cleanups);
    const clock = createVirtualClock();
    const { wf, seen, latch } = deafFailingRun("fails-beside-two", cleanups);
    const options = { workflows: [wf], clock, pollIntervalMs: 10, abortGraceMs: 20 };
    // Worker A claims nothing once the run has failed: only B may take it after the resume.
    let aClaims = true;
    const a = createEngine({
      ...options,
      leaseMs: LEASE_MS,
      log: () => {},
      store: around(makeStore(), {
        claimRuns: async (call, ...args) => (aClaims ? call(...args) : []),
      }),
    });
    cleanups.push(() => a.close());
    await a.start(wf, undefined, { id: "r" });
    await until(async () => (await a.getRun("r"))?.status === "failed", "the run failed");
    aClaims = false;
    expect(seen.running).toBe(1);

    let bClaims = 0;
    const b = createEngine({
      ...options,
      leaseMs: LEASE_MS,
      log: () => {},
      store: around(makeStore(), {
        claimRuns: async (call, ...args) => {
          bClaims++;
          return call(...args);
        },
      }),
    });
    cleanups.push(() => b.close());
    await b.resume("r");
    // Claim rounds of B (the virtual clock stands still), A's body still running.
    const after = bClaims;
    await until(() => bClaims > after + 5 || seen.begun > 1, "claim rounds of B");
    expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 1, most: 1 });

    // Once A's body has ended, A renews the hold no more (h10-held-run-outlived): once the
    // lease it held would have run out, B takes the run.
    latch.open();
    await until(() => seen.running === 0, "A's body ended");
    await until(
      async () => {
        if ((await b.getRun("r"))?.status === "completed") return true;
        await clock.advance(LEASE_MS / 2);
        return false;
      },
      "the run completed",
      10_000,
    );
    expect({ begun: seen.begun, most: seen.most, output: (await b.getRun("r"))?.output }).toEqual({
      begun: 2,
      most: 1,
      output: ["slow", "fixed"],
    });
  });
});
