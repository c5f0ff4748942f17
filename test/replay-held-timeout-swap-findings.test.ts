// a late call that took a record made inside the cascade of its own window while the
// hand-overs were held, and whose hold then ended by replayStallMs (the workflow's own work
// still pending), was handed that record; the owner, made late in the next window, took the
// impostor's record made inside that window's cascade, and the pair check was skipped for
// calls "in recorded cascades apart" (context.ts inRecordedCascadesApart): a silent swap.
// The first run is driven by gates so its shape is fixed; only the replay runs on timers.

import { describe, expect, it } from "vitest";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { delay, impostorAcrossWindows } from "./helpers/replay-at-go.js";

describe.each(BACKENDS)("%s: a held record handed over when the hold times out", (backend) => {
  const harness = useHarness(backend);

  it("an impostor whose timer won takes the owner's record; the owner comes late in the next window", async () => {
    const { handedToB, outcome: result } = await impostorAcrossWindows(harness(), {
      name: "held-timeout-swap",
      // First run: the timer is done before m (the test opens m's gate after it), so x is
      // made inside m's cascade. Replay: m is handed over at once, the timer pends.
      ownWork: () => delay(1500),
      // First run: t wins (its gate opens right after A's x); replay: t's hand-over is held
      // behind m's cascade, and this timer wins. (None on the first run, so t wins there
      // whatever the machine's load.)
      race: (t, first) => Promise.race([t, first ? new Promise(() => {}) : delay(600)]),
      engine: { replayStallMs: 1000 },
    });
    // Refused (NonDeterminismError) is fine; a swap is not, nor handing B A's value at all
    // (its code could go on to perform or record with it before A came and was refused).
    expect(handedToB.filter((v) => v !== "x by B")).toEqual([]);
    if (typeof result !== "string") expect(result).toEqual(["x by A", "x by B"]);
  }, 30_000);
});
