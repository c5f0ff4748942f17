// Release's heldFor through the public store API: a time beyond what PostgreSQL's bigint
// holds failed that backend's release with a bare "out of range for type bigint" (naming
// neither the run nor the field) while SQLite kept the run from other workers for ever; a
// negative time, or a hold for no worker, held nothing, silently. Each is refused now,
// naming the run and the field, and the run is left as it was.

import { describe, expect, it } from "vitest";
import { StoreError } from "../src/errors.js";
import { realClock } from "../src/lib/clock.js";
import type { Release } from "../src/store-api.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { cleanupsAfterEach } from "./helpers/lifecycle.js";

const cleanups = cleanupsAfterEach();

describe.each(BACKENDS)("%s: releaseRun's heldFor", (backend) => {
  it.each([
    ["heldFor.ms", { workerId: "w1", ms: 1e20 }],
    ["heldFor.ms", { workerId: "w1", ms: -5_000 }],
    ["heldFor.workerId", { workerId: "", ms: 60_000 }],
    ["heldFor.workerId", { ms: 60_000 }],
  ])("refuses %s in %j by name, the run left as it was", async (field, heldFor) => {
    const store = freshStorage(backend, cleanups)();
    cleanups.push(() => store.close());
    await store.open({ clock: realClock });
    await store.createRun({ id: "r", workflow: "a", version: "1", input: "null" } as never);
    const [c] = await store.claimRuns({
      workerId: "w1",
      workflows: ["a@1"],
      limit: 1,
      leaseMs: 60_000,
    });
    const release = {
      runId: "r",
      epoch: c?.run.epoch,
      status: "failed",
      readyAt: null,
      error: { name: "Error", message: "x" },
      heldFor,
    } as unknown as Release;
    const refused = await store.releaseRun(release).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(StoreError);
    expect(String(refused)).toContain(`run "r": ${field} is`);
    expect((await store.getRun("r"))?.status).toBe("running");
  });
});
