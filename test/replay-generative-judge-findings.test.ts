// Findings of a measurement of the generative replay test on fresh seeds (900000+): the judge.

import { describe, expect, it } from "vitest";
import type { RunResult } from "./helpers/gen-harness.js";
import { selfChecks } from "./helpers/gen-judge.js";
import type { ObsRow } from "./helpers/gen-ledger.js";
import type { Program } from "./helpers/gen-program.js";

describe("gen judge: the order check", () => {
  // ip-sqlite:901126, shrunk by hand: a Promise.all whose first branch awaits the workflow's
  // own timer, and a race (n4) with a synchronous winner inside it, after a join. In the
  // first execution the steps ran, and the race settled in a hand-over's cascade (not late);
  // in the replay, handed the recorded outcomes at once, it settled after the timer (late).
  // Same values, same order: no violation.
  const prog = {
    body: [
      {
        t: "par",
        id: "n0",
        branches: [
          [{ t: "io", id: "n1" }],
          [
            { t: "race", id: "n4", winner: [], losers: [] },
            { t: "step", id: "n5" },
          ],
        ],
      },
    ],
    events: [],
    nondet: null,
    broken: 0,
    terminal: false,
    uniqueNames: false,
  } as unknown as Program;

  const rows = (exec: string, raceLate: number): ObsRow[] =>
    [
      { instance: "n2", value: "a", late: 0 },
      { instance: "n4", value: "race won by 0", late: raceLate },
      { instance: "n5", value: "b", late: 0 },
    ].map((o, n) => ({ id: 0, run: "r", exec, n, ...o }));

  const result = (obs: ObsRow[]): RunResult =>
    ({
      status: "completed",
      runs: [],
      journals: new Map(),
      kills: [],
      ledger: { obsRows: () => obs, execRows: () => [], effectRows: () => [] },
    }) as unknown as RunResult;

  it("a value late in one execution and in a cascade in another is not out of order", () => {
    const r = result([...rows("0.1", 0), ...rows("0.2", 1)]);
    expect(selfChecks(prog, r, "reference").filter((x) => x.cls === "order")).toEqual([]);
  });

  it("still finds a late value that differs, and a placed one out of order", () => {
    const late = rows("0.2", 1).map((o) =>
      o.instance === "n4" ? { ...o, value: "race won by 1" } : o,
    );
    expect(
      selfChecks(prog, result([...rows("0.1", 0), ...late]), "reference").filter(
        (x) => x.cls === "order",
      ),
    ).toHaveLength(1);
    const swapped = rows("0.2", 0).reverse();
    expect(
      selfChecks(prog, result([...rows("0.1", 0), ...swapped]), "reference").filter(
        (x) => x.cls === "order",
      ).length,
    ).toBeGreaterThan(0);
  });
});
