// rows written plain before the store was marked encrypted (a keyless cairn's, or one
// from before encryption was turned on) stay plain; the triggers the mark installs
// (postgres/plain-triggers.ts) must let every later write that leaves those payloads as
// they were pass: a lease renewal, a claim, an expiry, a release of the run (waiting, then
// canceled by a cancel asked before the mark with a plain reason), an event consumed, an
// approval asked plain before the mark answered after it, markUnserved's pause.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { encryptedStore, type Store } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import type { NewRun } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { k1, markedSchemas, url } from "./helpers/marked-schemas.js";
import { stepOf } from "./helpers/step-records.js";

const { admin, track } = markedSchemas();

const newRun = (id: string, workflow = "wf"): NewRun => ({
  id,
  workflow,
  version: "1",
  input: `"SECRET input of ${id}"`,
  budgetLimit: {},
});

describe.skipIf(!pgUrl)("PostgreSQL plain triggers and rows written before the mark", () => {
  it("writes that leave a pre-mark plain payload as it was all pass", async () => {
    const schema = `plain_pre_${randomBytes(4).toString("hex")}`;
    track(schema);
    const make = (): Store => postgresStore(url, { schema });
    const clock = createVirtualClock();
    const plain = make();
    await plain.open({ clock });
    // Before the mark: runs with plain inputs; "r" claimed with a plain step, an event sent
    // to it and an approval asked; "c" claimed and asked to cancel with a plain reason.
    for (const id of ["r", "c", "u"]) await plain.createRun(newRun(id, id === "u" ? "gone" : "wf"));
    const claims = await plain.claimRuns({
      workerId: "w",
      workflows: ["wf@1"],
      limit: 2,
      leaseMs: 60_000,
    });
    const epochOf = (id: string) => claims.find((c) => c.run.id === id)!.run.epoch;
    expect(
      await plain.appendRecords([
        { runId: "r", epoch: epochOf("r"), steps: [stepOf("r", "s", 0)] },
      ]),
    ).toEqual([{ ok: true }]);
    await plain.sendEvent({ runId: "r", name: "go", payload: '"SECRET event"' });
    await plain.requestApproval({
      runId: "r",
      epoch: epochOf("r"),
      key: "a",
      name: "a",
      request: '"SECRET request"',
      requestedAt: 1,
      deadline: null,
      onTimeout: "reject",
    });
    expect(await plain.requestCancel("c", "SECRET cancel reason")).toMatchObject({
      state: "requested",
    });
    await plain.close();

    const keyed = encryptedStore(make(), { keys: [k1] });
    await keyed.open({ clock });
    try {
      const triggers = await admin.query(
        `SELECT count(*)::int AS n FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND t.tgname LIKE 'cairn_plain_guard%'`,
        [schema],
      );
      expect(triggers.rows[0].n).toBe(8);
      // A lease renewal, an expiry and a claim of the runs with plain inputs.
      expect(
        await keyed.renewLeases({
          workerId: "w",
          runs: [
            { runId: "r", epoch: epochOf("r") },
            { runId: "c", epoch: epochOf("c") },
          ],
          leaseMs: 60_000,
        }),
      ).toEqual({ lost: [], cancelRequested: ["c"] });
      expect(await keyed.expireLease({ runId: "r", epoch: epochOf("r") })).toEqual({ ok: true });
      await clock.advance(1);
      const again = await keyed.claimRuns({
        workerId: "w2",
        workflows: ["wf@1"],
        limit: 1,
        leaseMs: 60_000,
      });
      expect(again.map((c) => c.run.id)).toEqual(["r"]);
      const r = again[0]!.run;
      expect(r.input).toBe('"SECRET input of r"');
      // The pre-mark event consumed by a write; the pre-mark approval answered (encrypted).
      const events = await keyed.pendingEvents("r");
      expect(
        await keyed.appendRecords([
          {
            runId: "r",
            epoch: r.epoch,
            steps: [stepOf("r", "t", 1)],
            consume: [{ eventSeq: events[0]!.seq, key: "t" }],
          },
        ]),
      ).toEqual([{ ok: true }]);
      const answered = await keyed.answerApproval({
        runId: "r",
        key: "a",
        decision: "approved",
        answeredBy: "alice",
        comment: "fine",
        answer: null,
        via: "cli",
        tokenId: null,
        event: { name: "cairn.approval:a", payload: '{"decision":"approved"}' },
      });
      expect(answered.ok).toBe(true);
      // A release of the run, waiting; then of "c", whose cancel (asked before the mark,
      // its reason plain) takes effect: its reason stays as it was.
      expect(
        await keyed.releaseRun({
          runId: "r",
          epoch: r.epoch,
          status: "waiting",
          readyAt: null,
          waitingFor: ["never"],
        }),
      ).toMatchObject({ ok: true });
      const c = await keyed.releaseRun({
        runId: "c",
        epoch: epochOf("c"),
        status: "waiting",
        readyAt: null,
        waitingFor: ["never"],
      });
      expect(c).toMatchObject({ ok: true, run: { status: "canceled" } });
      // markUnserved pauses "u" (its workflow served by no one).
      await clock.advance(10_000);
      expect(await keyed.markUnserved({ served: ["wf@1"], graceMs: 0 })).toBe(1);
      expect((await keyed.getRun("u"))?.status).toBe("paused");
      const raw = await admin.query(`SELECT id, input, reason FROM "${schema}".runs ORDER BY id`);
      expect(raw.rows.find((x) => x.id === "c")?.reason).toBe("SECRET cancel reason");
    } finally {
      await keyed.close();
    }
  });
});
