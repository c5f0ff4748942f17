// A worker given no keys (its store not an encryptedStore) on a store an encryptedStore
// marked: before the mend it stored its step results and the run's output in plain text
// beside the encrypted records. Now the store refuses its first plain write, the worker
// pauses the run with a reason saying what to do (handed back, any keyless worker would
// claim it again at once), and a worker given the keys, told to resume it, finishes it.
// Both backends.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  type Engine,
  encryptedStore,
  type Store,
  workflow,
} from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

const wf = workflow({ name: "wf", version: "1" }, async (ctx) => {
  const a = await ctx.step("one", async () => "SECRET-one");
  const b = await ctx.step("two", async () => "SECRET-two");
  return `${a}+${b}`;
});

describe.each(BACKENDS)("a keyless worker on a store marked encrypted (%s)", (backend) => {
  it("is refused its first plain write, pauses the run, and a keyed worker finishes it", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    const engine = (store: Store, worker: boolean): Engine => {
      const e = createEngine({ store, workflows: [wf], worker, pollIntervalMs: 10 });
      cleanups.push(() => e.close());
      return e;
    };
    try {
      const make = freshStorage(backend, cleanups);
      // A keyed client opens the store first: it marks it.
      const keyedClient = engine(encryptedStore(make(), { keys: [k1] }), false);
      expect(await keyedClient.listRuns({ limit: 1 })).toEqual([]);
      // A run started without input (nothing to keep secret, so a keyless start may).
      const plainClient = engine(make(), false);
      await plainClient.start(wf, undefined, { id: "r1" });
      // The keyless worker claims it and is refused the result of its first step.
      const plainWorker = engine(make(), true);
      await until(
        async () => (await keyedClient.getRun("r1"))?.status === "paused",
        "the keyless worker pauses r1",
      );
      const paused = await keyedClient.getRun("r1");
      expect(paused?.reason).toMatch(
        /this worker writes without encryption keys to the store .* which is marked encrypted, so the result of step "one" of run "r1" was refused \(nothing was written\); give the worker the keys and resume the run/,
      );
      await plainWorker.close();
      const raw = make();
      await raw.open({ clock: realClock });
      cleanups.push(() => raw.close());
      expect((await raw.loadJournal("r1")).steps).toEqual([]);
      // A worker with the keys, told to resume it, finishes it: everything encrypted.
      const keyedWorker = engine(encryptedStore(make(), { keys: [k1] }), true);
      await keyedWorker.resume("r1");
      await until(
        async () => (await keyedWorker.getRun("r1"))?.status === "completed",
        "the keyed worker finishes r1",
      );
      expect((await keyedWorker.getRun("r1"))?.output).toBe("SECRET-one+SECRET-two");
      const stored = await raw.loadJournal("r1");
      expect(stored.steps.map((s) => s.key)).toEqual(["one", "two"]);
      for (const s of stored.steps) expect(s.result?.startsWith("cairn:enc:1:k1:")).toBe(true);
      expect((await raw.getRun("r1"))?.output?.startsWith("cairn:enc:1:k1:")).toBe(true);
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });

  it("a keyless worker's own start of a run that ends at once: its output is refused, the run paused", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    try {
      const make = freshStorage(backend, cleanups);
      const keyed = createEngine({
        store: encryptedStore(make(), { keys: [k1] }),
        workflows: [],
        worker: false,
      });
      cleanups.push(() => keyed.close());
      expect(await keyed.listRuns({ limit: 1 })).toEqual([]); // opened: marked
      const quick = workflow({ name: "quick", version: "1" }, async () => "SECRET-output");
      const worker = createEngine({ store: make(), workflows: [quick], pollIntervalMs: 10 });
      cleanups.push(() => worker.close());
      // No input (nothing to keep secret): the run is made; its output is refused.
      await worker.start(quick, undefined, { id: "q1" });
      await until(async () => (await keyed.getRun("q1"))?.status === "paused", "q1 pauses");
      const stored = await keyed.getRun("q1");
      expect(stored?.reason).toMatch(/the output of run "q1" was refused/);
      expect(stored?.output ?? null).toBeNull();
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });
});
