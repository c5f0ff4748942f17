// A held hand-over waits for work the workflow's own code began that late-work.ts still
// counts: a timer until it fires, a child process or socket while its handle is open and
// ref'd (handle-work.ts), anything else (a file read) for a second's grace after it began. A
// late call that takes a record made inside a cascade while the hand-overs are held keeps the
// hold that long (Context.doubtfulCall). A branch that runs a command in workflow code
// (execFile, 1.5 s) before its call outlasted the grace when a child process counted only for
// it: the hold ended, and the call of another branch, come early from a race its own timer
// won, was handed the record's value (A's) and performed an effect with it; the owner's call,
// when it came, was refused, after the effect. Mended: the hold lasts while the command runs.
// The journal ends right after A's record (its worker dies then), as in
// replay-journal-end-swap-findings, whose own work (a file read, then a timer) the hold sees.
// Deterministic: B's timer is 100 ms, the command 1.5 s (counted until it exits, past the
// 1 s grace).

import { execFile } from "node:child_process";
import { describe, expect, it } from "vitest";
import { journalEndSwap, REFUSED_UNSWAPPED } from "./helpers/crash-replay.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

const command = () => new Promise<void>((r) => execFile("sleep", ["1.5"], () => r()));

describe.each(BACKENDS)("%s: a held record's owner waiting for a command", (backend) => {
  const harness = useHarness(backend);

  it("is not swapped with an early call of its name, nor an effect performed with its value", async () => {
    // The first run's command was done before m; the replay's takes 1.5 s.
    // Was: got ["b=a"], performed ["b sent a"], then refused at A's call.
    expect(await journalEndSwap(harness(), "command-swap", command)).toEqual(REFUSED_UNSWAPPED);
  }, 30_000);
});
