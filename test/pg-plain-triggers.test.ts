// PostgreSQL: the mark that a store encrypts installs triggers that refuse plain payloads in
// the database (store/postgres/plain-triggers.ts). A keyless store opened before the mark
// believed "not marked" and wrote plain text until its background read of the mark (about a
// second) returned: each write below landed. Now the database refuses it with the guard's
// own refusal, and lets through what the guard lets through (cairn's cancel words and the
// event made of them, an approval's answer with neither answer nor comment, a fork's copies
// of records written before the mark). An unmarked store has no trigger (it pays nothing);
// the mark's removal drops them; a store marked before them gets them at its next open.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { type EncryptionKeyMissingError, encryptedStore, type Store } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { canceledChildEvent, parentCanceledReason } from "../src/store/cancel-texts.js";
import type { RunWrite } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { k1, markedSchemas, url } from "./helpers/marked-schemas.js";
import {
  approvalAnswer,
  approvalAsked,
  newRun,
  refusal,
  stepWith,
} from "./helpers/plain-records.js";

const { admin, track, triggers } = markedSchemas();

async function refused(write: Promise<unknown>, what: RegExp): Promise<EncryptionKeyMissingError> {
  const err = await refusal(write);
  expect(err.what).toMatch(what);
  expect(err.message).toMatch(/marked encrypted.*Give this process the keys/);
  return err;
}

function storage() {
  const schema = `plain_trig_${randomBytes(4).toString("hex")}`;
  track(schema);
  return { schema, make: (): Store => postgresStore(url, { schema }) };
}

describe.skipIf(!pgUrl)("PostgreSQL: the triggers the encrypted mark installs", () => {
  it("are installed with the mark and dropped with it; none on an unmarked store", async () => {
    const { schema, make } = storage();
    const clock = createVirtualClock();
    const plain = make();
    await plain.open({ clock });
    try {
      expect(await triggers(schema)).toBe(0);
      const keyed = encryptedStore(make(), { keys: [k1] });
      await keyed.open({ clock });
      await keyed.close();
      expect(await triggers(schema)).toBe(8);
      await plain.unmarkEncrypted?.();
      expect(await triggers(schema)).toBe(0);
      expect((await plain.createRun(newRun("after", '"plain again"'))).created).toBe(true);
    } finally {
      await plain.close();
    }
  });

  it("a store marked before them gets them when a keyless store opens it", async () => {
    const { schema, make } = storage();
    const clock = createVirtualClock();
    const first = make();
    await first.open({ clock });
    await first.close();
    // The mark as a cairn before the triggers wrote it.
    await admin.query(
      `INSERT INTO "${schema}".store_marks (name, marked_at) VALUES ('encrypted', 1)`,
    );
    expect(await triggers(schema)).toBe(0);
    const plain = make();
    await plain.open({ clock });
    try {
      expect(await triggers(schema)).toBe(8);
    } finally {
      await plain.close();
    }
  });

  it("refuse a keyless store's plain writes in its window; cairn's own words and copies pass", async () => {
    const { make } = storage();
    const clock = createVirtualClock();
    const plain = make();
    await plain.open({ clock });
    try {
      // Before the mark: a parent and its child, a claimed run with a plain step.
      await plain.createRun(newRun("r", "-1"));
      const [claim] = await plain.claimRuns({
        workerId: "w",
        workflows: ["wf@1"],
        limit: 1,
        leaseMs: 600_000,
      });
      expect(claim?.run.id).toBe("r");
      const epoch = claim!.run.epoch;
      await plain.createRun(newRun("p", "-1"));
      await plain.createRun(newRun("c", "-1", "p"));
      const step = (key: string, result: string) => stepWith("r", key, result);
      const write = (w: Omit<RunWrite, "runId" | "epoch">) =>
        plain.appendRecords([{ runId: "r", epoch, ...w }]);
      expect(await write({ steps: [step("old", '"before the mark"')] })).toEqual([{ ok: true }]);
      await plain.requestApproval(approvalAsked("r", epoch, "-1"));

      const keyed = encryptedStore(make(), { keys: [k1] });
      await keyed.open({ clock });
      try {
        // The keyless store still believes "not marked": the database refuses.
        await refused(write({ steps: [step("s2", '"SECRET"')] }), /result of step "s2" of run "r"/);
        await refused(
          write({
            attempts: [
              {
                runId: "r",
                key: "s3",
                generation: 0,
                attempt: 1,
                startedAt: 1,
                endedAt: 2,
                error: { name: "Error", message: "SECRET" },
                spend: {},
                retryAt: null,
              },
            ],
          }),
          /error of attempt 1 of step "s3" of run "r"/,
        );
        await refused(plain.requestCancel("r", "SECRET why"), /cancel reason of run "r"/);
        await refused(
          plain.appendStream({ runId: "r", chunks: ["SECRET"] }),
          /stream chunk of run "r"/,
        );
        await refused(
          plain.putWorkspaceObjects({
            runId: "r",
            epoch,
            objects: [
              { hash: "cd".repeat(32), kind: "blob", size: 3, data: new Uint8Array([1, 2, 3]) },
            ],
            refs: [],
          }),
          /workspace object/,
        );
        const answer = approvalAnswer("r");
        await refused(plain.answerApproval(answer), /comment of approval "a1" of run "r"/);
        await refused(
          plain.releaseRun({
            runId: "r",
            epoch,
            status: "failed",
            error: { name: "Error", message: "SECRET" },
            readyAt: null,
          }),
          /error of run "r"/,
        );
        // Nothing of it landed.
        const journal = await keyed.loadJournal("r");
        expect(journal.steps.map((s) => s.key)).toEqual(["old"]);
        expect(journal.attempts).toEqual([]);
        expect(await keyed.readStream({ runId: "r", from: 0 })).toEqual([]);
        expect((await keyed.getRun("r"))?.status).toBe("running");

        // What the guard lets through, the database does too: an answer with neither
        // answer nor comment (its event plain), a cascade's cancel in cairn's words with
        // its child-result event, a fork (by the keyed store) copying a step written plain
        // before the mark.
        const given = await plain.answerApproval({ ...answer, comment: null });
        expect("approval" in given && given.approval.status).toBe("approved");
        const why = parentCanceledReason("p", "canceled by request");
        const canceled = await plain.requestCancel("c", why, {
          parentEvent: canceledChildEvent("c", why),
        });
        expect(canceled.state).toBe("canceled");
        expect((await keyed.listEvents("p")).map((e) => e.name)).toEqual(["cairn.child:c"]);
        const forked = await keyed.forkRun!({
          sourceId: "r",
          run: newRun("f", "-1"),
          copy: [{ key: "old", generation: 0 }],
        });
        expect(forked.created).toBe(true);
        expect((await keyed.loadJournal("f")).steps.map((s) => s.result)).toEqual([
          '"before the mark"',
        ]);
        // A paused run's reason is the engine's, kept plain.
        const paused = await plain.releaseRun({
          runId: "r",
          epoch,
          status: "paused",
          reason: "waiting for someone with the keys",
          readyAt: null,
        });
        expect(paused.ok).toBe(true);
      } finally {
        await keyed.close();
      }
    } finally {
      await plain.close();
    }
  });
});
