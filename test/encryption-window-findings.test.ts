// A store opened without keys (a plain process) before another process marked it encrypted
// believed "not marked" and wrote plain payloads after the mark: it read the mark at open,
// then again only in the background about once a second, its first write after the mark
// landing before that read's answer. On SQLite the mark is now read inside the write's own
// transaction while the store is believed unmarked (the file's write lock orders the mark
// and the write): the first plain write after the mark is refused, nothing written. On
// PostgreSQL the mark installs triggers that refuse plain payloads in the database
// (store/postgres/plain-triggers.ts), mapped to the same refusal.

import { describe, expect, it } from "vitest";
import { encryptedStore, type Store } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, type Backend, freshStorage } from "./helpers/engines.js";
import { k1, newRun, refusal, stepWith } from "./helpers/plain-records.js";

async function plainThenMarked(backend: Backend, cleanups: Array<() => Promise<void> | void>) {
  const make = freshStorage(backend, cleanups);
  const clock = createVirtualClock();
  const plain: Store = make();
  await plain.open({ clock });
  cleanups.push(() => plain.close());
  // Before the mark: plain text goes, and a run is there for the writes below.
  expect((await plain.createRun(newRun("r1", '"before"'))).created).toBe(true);
  const [claim] = await plain.claimRuns({
    workerId: "w-plain",
    workflows: ["wf@1"],
    limit: 1,
    leaseMs: 60_000,
  });
  expect(claim?.run.id).toBe("r1");
  // Then another process opens the store with keys: it marks it.
  const keyed = encryptedStore(make(), { keys: [k1] });
  await keyed.open({ clock });
  cleanups.push(() => keyed.close());
  expect(await keyed.isMarkedEncrypted?.()).toBe(true);
  return { plain, keyed, epoch: claim!.run.epoch };
}

async function writesAfterTheMark(backend: Backend): Promise<void> {
  const cleanups: Array<() => Promise<void> | void> = [];
  try {
    const { plain, keyed, epoch } = await plainThenMarked(backend, cleanups);
    const step = stepWith("r1", "s1", '"SECRET-step"');
    const e1 = await refusal(plain.appendRecords([{ runId: "r1", epoch, steps: [step] }]));
    expect([e1.store, e1.runId, e1.key]).toEqual([plain.description, "r1", "s1"]);
    expect(e1.message).toMatch(/marked encrypted.*Give this process the keys/);
    const e2 = await refusal(plain.sendEvent({ runId: "r1", name: "go", payload: '"SECRET"' }));
    expect(e2.what).toMatch(/payload of event "go"/);
    const e3 = await refusal(plain.createRun(newRun("r2", '"SECRET-input"')));
    expect(e3.what).toBe('the input of run "r2"');
    // Nothing of it landed.
    expect((await keyed.loadJournal("r1")).steps).toEqual([]);
    expect(await keyed.listEvents("r1")).toEqual([]);
    expect(await keyed.getRun("r2")).toBeUndefined();
    // What holds nothing still goes (a run started without input).
    expect((await plain.createRun(newRun("r3", "-1"))).created).toBe(true);
  } finally {
    for (const c of cleanups.splice(0).reverse()) await c();
  }
}

describe.each(BACKENDS)("a plain store opened before another process marked it (%s)", (backend) => {
  it("refuses its first plain step, event and run input after the mark", async () => {
    await writesAfterTheMark(backend);
  });
});
