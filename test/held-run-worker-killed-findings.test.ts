// a worker process SIGKILLed the moment its release holding a run for a step body has
// committed (Release's heldFor). Its hold outlives it; before, a worker on the same host
// found its pid dead and ended its leases (removeWorker), not its hold: the run, resumed,
// waited out the hold (a whole lease, here 60 s) with no body of it running anywhere.

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { createEngine, realClock, sqliteStore } from "../src/index.js";
import { pidNamespace } from "../src/lib/process-identity.js";
import { holdWorkflow } from "./fixtures/held-run-workflows.js";
import { spawnFixture } from "./helpers/child.js";
import { tempDir } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const tmp = tempDir("cairn-held-kill-");
afterAll(() => tmp.cleanup());

it.skipIf(pidNamespace() === null)(
  "the hold of a worker killed as it set it ends when another worker finds it dead",
  async () => {
    const db = join(tmp.dir, "cairn.db");
    const res = await spawnFixture("held-run-kill-child.ts", [db, tmp.dir, "r"]).done;
    expect(res.signal, res.stderr).toBe("SIGKILL");
    const side = sqliteStore(db);
    await side.open({ clock: realClock });
    const held = await side.getRun("r");
    await side.close();
    expect(held?.status).toBe("failed");
    expect(held?.heldBy).toEqual(expect.any(String));
    expect(held!.heldUntil! - held!.updatedAt).toBe(60_000);
    const wf = holdWorkflow(tmp.dir);
    const engine = createEngine({
      store: sqliteStore(db),
      workflows: [wf],
      pollIntervalMs: 10,
      leaseMs: 60_000,
      heartbeatMs: 200,
    });
    try {
      writeFileSync(join(tmp.dir, "go"), "");
      await engine.resume("r");
      // The hold would last 60 s: found dead, its worker holds nothing.
      expect(await within(engine.handle("r").result(), 20_000, "the resumed run")).toEqual([
        "slow",
        "fixed",
      ]);
      // The killed body began once; the resumed execution began it again: no body ran beside it.
      expect(readFileSync(join(tmp.dir, "log"), "utf8")).toBe("slow\nslow\n");
    } finally {
      await engine.close();
    }
  },
  60_000,
);
