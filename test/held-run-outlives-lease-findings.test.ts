// A run released failed while a step body of it still runs in worker A (deaf to its abort)
// is held from other workers for one lease (held-runs-across-workers). Worker A lives on, its
// heartbeat answering, and the body runs past that lease: then worker B claimed the run and
// began the same call beside A's body (one call executing twice at the same time), whether
// A had claimed the resumed run itself (kept unexecuted, as an orphan, whose lease nothing
// renewed) or the hold had simply run out before the resume.

import { describe, expect, it } from "vitest";
import { createEngine, type Engine } from "../src/index.js";
import type { Store } from "../src/store-api.js";
import { createVirtualClock } from "../src/testing/index.js";
import { deafFailingRun } from "./helpers/deaf-run.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach } from "./helpers/lifecycle.js";
import { until } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

const cleanups = cleanupsAfterEach();
const LEASE_MS = 5_000;

const deafRun = () => deafFailingRun("outlives-its-hold", cleanups);

describe.each(BACKENDS)(
  "%s: a held run whose body outlives a lease in a live worker",
  (backend) => {
    function engines(wf: ReturnType<typeof deafRun>["wf"], aClaims: () => boolean) {
      const makeStore = freshStorage(backend, cleanups);
      const clock = createVirtualClock();
      const options = { workflows: [wf], clock, pollIntervalMs: 10, abortGraceMs: 20 };
      const open = (store: Store): Engine => {
        const e = createEngine({ ...options, leaseMs: LEASE_MS, log: () => {}, store });
        cleanups.push(() => e.close());
        return e;
      };
      const a = open(
        around(makeStore(), {
          claimRuns: async (call, ...args) => (aClaims() ? call(...args) : []),
        }),
      );
      let bClaims = 0;
      const b = () =>
        open(
          around(makeStore(), {
            claimRuns: async (call, ...args) => {
              bClaims++;
              return call(...args);
            },
          }),
        );
      return { a, b, clock, bClaims: () => bClaims };
    }

    it("is not claimed by another worker once the resumed run's claim here outlives its lease", async () => {
      const { wf, seen, latch } = deafRun();
      const { a, b: openB, clock, bClaims } = engines(wf, () => true);
      await a.start(wf, undefined, { id: "r" });
      await until(async () => (await a.getRun("r"))?.status === "failed", "the run failed");
      // Resumed at once: A claims it (the hold is A's) and keeps it unexecuted, the body running.
      await a.resume("r");
      await until(async () => (await a.getRun("r"))?.status === "running", "A claimed it back");
      const b = openB();
      // A's heartbeat answers all along; the body runs on past a lease.
      for (let i = 0; i < 4; i++) {
        await clock.advance(LEASE_MS / 2);
        const after = bClaims();
        await until(() => bClaims() > after + 3 || seen.begun > 1, "claim rounds of B");
      }
      expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 1, most: 1 });
      latch.open();
      await until(async () => (await b.getRun("r"))?.status === "completed", "completed", 10_000);
      expect({ most: seen.most, output: (await b.getRun("r"))?.output }).toEqual({
        most: 1,
        output: ["slow", "fixed"],
      });
    });

    it("is not claimed by another worker when resumed after a lease, the body still running", async () => {
      const { wf, seen, latch } = deafRun();
      let aClaims = true;
      const { a, b: openB, clock, bClaims } = engines(wf, () => aClaims);
      await a.start(wf, undefined, { id: "r" });
      await until(async () => (await a.getRun("r"))?.status === "failed", "the run failed");
      aClaims = false; // as if B won the race for the resumed run
      // A's heartbeat answers all along; the body runs on past a lease.
      for (let i = 0; i < 4; i++) await clock.advance(LEASE_MS / 2);
      const b = openB();
      await b.resume("r");
      const after = bClaims();
      await until(() => bClaims() > after + 5 || seen.begun > 1, "claim rounds of B");
      expect({ begun: seen.begun, most: seen.most }).toEqual({ begun: 1, most: 1 });
      // Once the body has ended, A renews the hold no more: it runs out, and B takes the run.
      latch.open();
      await until(() => seen.running === 0, "the body ended");
      await until(
        async () => {
          if ((await b.getRun("r"))?.status === "completed") return true;
          await clock.advance(LEASE_MS / 2);
          return false;
        },
        "completed",
        10_000,
      );
      expect({ most: seen.most, output: (await b.getRun("r"))?.output }).toEqual({
        most: 1,
        output: ["slow", "fixed"],
      });
    });
  },
);
