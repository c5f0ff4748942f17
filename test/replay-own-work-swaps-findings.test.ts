// A held hand-over waits for the workflow's own work that late-work.ts counts. A worker
// thread the workflow code starts (its WORKER resource) counted only for the grace a file read
// gets (1 s): a branch that waits for a worker thread's answer (1.5 s) before its call outlasted
// the hold, and the call of another branch, come early from a race its own timer won, was
// handed the record's value (A's) and performed an effect with it; the owner's call, when it
// came, was refused, after the effect. Mended: a worker thread counts while it runs and is
// ref'd (handle-work.ts: its handle answers hasRef() as a socket's does, nothing once it
// exited). The program of replay-hold-untracked-wait-findings, with the worker thread in
// place of its command. Deterministic: B's timer is 100 ms, the thread 1.5 s.
// Held back (it.fails): an fs.watch event 1.5 s later, written from outside the run.

import { rmSync, watch, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { afterAll, describe, expect, it } from "vitest";
import { outsideWorkflow } from "../src/workflow/call-scope.js";
import { journalEndSwap, REFUSED_UNSWAPPED } from "./helpers/crash-replay.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

/** A worker thread that answers after 1.5 s (past the 1 s grace), then exits. */
const threadAnswer = () =>
  new Promise<void>((resolve) => {
    const w = new Worker(
      "setTimeout(() => require('node:worker_threads').parentPort.postMessage('done'), 1500)",
      { eval: true },
    );
    w.once("message", () => resolve());
  });

/** A file change that comes 1.5 s later, from outside the run (another process writes it):
 *  fs.watch's handle (FSEVENTWRAP) is left to the grace, as a server is. */
const fileChange = () =>
  new Promise<void>((resolve) => {
    const path = join(tmpdir(), `own-work-watch-${process.pid}-${Math.random()}`);
    writeFileSync(path, "0");
    const w = watch(path, () => {
      w.close();
      rmSync(path, { force: true });
      resolve();
    });
    // Outside the run's scope: no timer of the workflow code's.
    outside.push(outsideWorkflow(() => setTimeout(() => writeFileSync(path, "1"), 1500)));
  });
const outside: NodeJS.Timeout[] = [];
afterAll(() => {
  for (const t of outside) clearTimeout(t);
});

describe.each(BACKENDS)("%s: a held record's owner waiting for a worker thread", (backend) => {
  const harness = useHarness(backend);

  // The first run had no thread to wait for; the replay's answers after 1.5 s.
  const attack = (ownWork: () => Promise<void>) => async () => {
    expect(await journalEndSwap(harness(), "thread-swap", ownWork)).toEqual(REFUSED_UNSWAPPED);
  };

  it(
    "waiting for a worker thread: not swapped with an early call of its name, nor an effect performed with its value",
    attack(threadAnswer),
    30_000,
  );
  // Held back: a watcher lives as long as the code that made it wants (handle-work.ts leaves
  // it to the grace, as a server); counted while open, one never closed would hold every
  // replay as a kept connection does. The owner's call comes 1.5 s late: b is handed a's value.
  it.fails("waiting for an fs.watch event (held back): not swapped", attack(fileChange), 30_000);
});
