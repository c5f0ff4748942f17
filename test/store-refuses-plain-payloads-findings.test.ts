// A store marked encrypted (an encryptedStore opened it) refuses a payload written in plain
// text by whoever writes it: a Store opened without encryptedStore (the key configuration
// forgotten) over the same database, at each verb that carries one. Before the mend only
// the keyless doors (the CLI, the HTTP API) looked at the mark: each write below was stored
// in plain text beside the encrypted ones, with nothing said. Both backends.

import { describe, expect, it } from "vitest";
import { EncryptionKeyMissingError, encryptedStore, type Store } from "../src/index.js";
import { MARK_FRESH_MS } from "../src/store/plain-payloads.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, type Backend, freshStorage } from "./helpers/engines.js";
import { approvalAnswer, approvalAsked, k1, newRun, refusal } from "./helpers/plain-records.js";

/** Expects `write` refused as a plain payload of run `runId` (and `key`), naming `what`. */
async function refused(
  write: Promise<unknown>,
  store: Store,
  expected: { runId: string; key?: string; what: RegExp },
): Promise<void> {
  const e = await refusal(write);
  expect(e.code).toBe("ENCRYPTION_KEY_MISSING");
  expect(e.store).toBe(store.description);
  expect(e.runId).toBe(expected.runId);
  if (expected.key !== undefined) expect(e.key).toBe(expected.key);
  expect(e.what).toMatch(expected.what);
  expect(e.message).toContain(JSON.stringify(store.description));
  expect(e.message).toMatch(/nothing was written.*\$CAIRN_ENCRYPTION_KEYS.*unmarkEncrypted\(\)/);
  expect(e.message).not.toContain("SECRET");
}

async function opened(
  backend: Backend,
  cleanups: Array<() => Promise<void> | void>,
): Promise<{
  keyed: Store;
  plain: Store;
  make: () => Store;
  clock: ReturnType<typeof createVirtualClock>;
}> {
  const make = freshStorage(backend, cleanups);
  const clock = createVirtualClock();
  const keyed = encryptedStore(make(), { keys: [k1] });
  await keyed.open({ clock });
  cleanups.push(() => keyed.close());
  const plain = make();
  await plain.open({ clock });
  cleanups.push(() => plain.close());
  return { keyed, plain, make, clock };
}

describe.each(BACKENDS)("a store marked encrypted, written without keys (%s)", (backend) => {
  it("refuses every plain payload, writing nothing; metadata and ciphertext pass", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    try {
      const { keyed, plain } = await opened(backend, cleanups);
      await keyed.createRun(newRun("r1", '"SECRET-input"'));

      await refused(plain.createRun(newRun("r2", '"SECRET-input"')), plain, {
        runId: "r2",
        what: /^the input of run "r2"$/,
      });
      expect(await plain.getRun("r2")).toBeUndefined();
      // A run started without input holds nothing (the codec's undefined): it is let be.
      expect((await plain.createRun(newRun("r3", "-1"))).created).toBe(true);

      await refused(plain.sendEvent({ runId: "r1", name: "card", payload: '"SECRET"' }), plain, {
        runId: "r1",
        what: /payload of event "card"/,
      });
      await refused(plain.requestCancel("r1", "SECRET-why"), plain, {
        runId: "r1",
        what: /cancel reason/,
      });
      await refused(
        plain.forkRun({ sourceId: "r1", run: newRun("f1", '"SECRET"'), copy: [] }),
        plain,
        { runId: "f1", what: /input of run "f1"/ },
      );
      await refused(plain.appendStream({ runId: "r1", chunks: ["SECRET"] }), plain, {
        runId: "r1",
        what: /stream chunk/,
      });

      // A worker without keys claims the run (no payload: allowed), then writes.
      const [claim] = await plain.claimRuns({
        workerId: "w-plain",
        workflows: ["wf@1"],
        limit: 1,
        leaseMs: 60_000,
      });
      expect(claim?.run.id).toBe("r1");
      const { epoch } = claim!.run;
      const intent = {
        runId: "r1",
        key: "s1",
        kind: "step" as const,
        name: "s1",
        data: '"SECRET"',
        createdAt: 1,
      };
      await refused(plain.appendRecords([{ runId: "r1", epoch, intents: [intent] }]), plain, {
        runId: "r1",
        key: "s1",
        what: /intent of "s1" of run "r1"/,
      });
      await refused(plain.requestApproval(approvalAsked("r1", epoch, '"SECRET"')), plain, {
        runId: "r1",
        key: "a1",
        what: /request of approval "a1"/,
      });
      await refused(
        plain.putWorkspaceObjects({
          runId: "r1",
          epoch,
          objects: [
            { hash: "ab".repeat(32), kind: "blob", size: 3, data: new Uint8Array([1, 2, 3]) },
          ],
          refs: [],
        }),
        plain,
        { runId: "r1", what: /workspace object/ },
      );
      await refused(
        plain.releaseRun({
          runId: "r1",
          epoch,
          status: "completed",
          output: '"SECRET"',
          readyAt: null,
        }),
        plain,
        { runId: "r1", what: /output of run "r1"/ },
      );
      await refused(
        plain.releaseRun({
          runId: "r1",
          epoch,
          status: "failed",
          error: { name: "Error", message: "SECRET" },
          readyAt: null,
        }),
        plain,
        { runId: "r1", what: /error of run "r1"/ },
      );
      // Nothing of it landed.
      const journal = await keyed.loadJournal("r1");
      expect(journal.intents).toEqual([]);
      expect(await keyed.listEvents("r1")).toEqual([]);
      expect(await keyed.listApprovals("r1")).toEqual([]);
      expect(await keyed.readStream({ runId: "r1", from: 0 })).toEqual([]);
      expect((await keyed.getRun("r1"))?.status).toBe("running");

      // What an encryptedStore keeps plain passes: a pause's reason.
      const paused = await plain.releaseRun({
        runId: "r1",
        epoch,
        status: "paused",
        reason: "waiting for someone with the keys",
        readyAt: null,
      });
      expect(paused.ok).toBe(true);
      // An encryptedStore's writes reach the same backend as ciphertext: they pass.
      expect((await keyed.resumeRun("r1", {})).ok).toBe(true);
      const [again] = await keyed.claimRuns({
        workerId: "w-keyed",
        workflows: ["wf@1"],
        limit: 1,
        leaseMs: 60_000,
      });
      const e2 = again!.run.epoch;
      expect(await keyed.appendRecords([{ runId: "r1", epoch: e2, intents: [intent] }])).toEqual([
        { ok: true },
      ]);
      const asked = await keyed.requestApproval(approvalAsked("r1", e2, '"SECRET"'));
      expect(asked.ok).toBe(true);
      const answer = approvalAnswer("r1");
      await refused(plain.answerApproval(answer), plain, {
        runId: "r1",
        key: "a1",
        what: /comment of approval "a1"/,
      });
      // An answer with neither a comment nor an answer holds nothing the approval's row does
      // not keep plain (decision, who, how): a keyless door may give it.
      const given = await plain.answerApproval({ ...answer, comment: null });
      expect("approval" in given && given.approval.status).toBe("approved");
      expect((await keyed.readJournalPage({ runId: "r1", from: 0, limit: 10 })).intents).toEqual([
        expect.objectContaining({ key: "s1", data: '"SECRET"' }),
      ]);
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });

  it("a mark written later by another process counts at once (SQLite: read in the write; PostgreSQL: its triggers); its removal at once", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    try {
      const make = freshStorage(backend, cleanups);
      const clock = createVirtualClock();
      const plain = make();
      await plain.open({ clock });
      cleanups.push(() => plain.close());
      // Not marked: plain text is written as ever (the mark is read once, then believed).
      expect((await plain.createRun(newRun("p1", '"before"'))).created).toBe(true);
      // Another process opens it encrypted: it marks it.
      const keyed = encryptedStore(make(), { keys: [k1] });
      await keyed.open({ clock });
      cleanups.push(() => keyed.close());
      expect(await keyed.isMarkedEncrypted?.()).toBe(true);
      // No window: SQLite reads the mark inside the write's transaction, and on PostgreSQL
      // the mark installed triggers that refuse plain payloads (encryption-window-findings).
      await refused(plain.createRun(newRun("p2", '"in the window"')), plain, {
        runId: "p2",
        what: /input of run "p2"/,
      });
      await plain.createRun(newRun("p2", "-1"));
      await clock.advance(MARK_FRESH_MS);
      // Then the next plain write reads the mark again, without waiting for it: refused all
      // the same (before this, on PostgreSQL, it landed, and maybe one more while that read
      // was under way).
      const landed: string[] = [];
      let refusal: unknown;
      for (let i = 0; i < 50 && refusal === undefined; i++) {
        await plain.createRun(newRun(`late${i}`, '"late"')).then(
          () => landed.push(`late${i}`),
          (err: unknown) => {
            refusal = err;
          },
        );
      }
      expect(refusal).toBeInstanceOf(EncryptionKeyMissingError);
      expect(landed).toEqual([]);
      await refused(plain.createRun(newRun("p3", '"SECRET"')), plain, {
        runId: "p3",
        what: /input of run "p3"/,
      });
      expect(await plain.getRun("p3")).toBeUndefined();
      // Removed by another process: the refusal reads the mark again, so it counts at once.
      const other = make();
      await other.open({ clock });
      await other.unmarkEncrypted?.();
      await other.close();
      expect((await plain.createRun(newRun("p4", '"after"'))).created).toBe(true);
      // Nothing recorded was rewritten: the plain inputs written unmarked read back as written.
      expect((await keyed.getRun("p1"))?.input).toBe('"before"');
      expect((await keyed.getRun("p2"))?.input).toBe("-1");
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });

  it("a plain store opened after the mark refuses its first plain write, and reads all the same", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    try {
      const { keyed, plain } = await opened(backend, cleanups);
      await keyed.createRun(newRun("k1run", '"SECRET-input"'));
      // Reading (a dashboard, `cairn show`) is never refused: the payload comes as stored.
      const seen = await plain.getRun("k1run");
      expect(seen?.input.startsWith("cairn:enc:1:k1:")).toBe(true);
      expect((await plain.listRuns({})).map((r) => r.id)).toEqual(["k1run"]);
      await refused(plain.createRun(newRun("x", '"SECRET"')), plain, {
        runId: "x",
        what: /input of run "x"/,
      });
      // Ciphertext copied as it is stays ciphertext (a fork of an encrypted run's input).
      const copied = await plain.forkRun({
        sourceId: "k1run",
        run: newRun("fork", seen!.input),
        copy: [],
      });
      expect(copied.created).toBe(true);
      // Plain text that merely looks like an envelope (escaped as version 0) is plain.
      await refused(plain.createRun(newRun("esc", "cairn:enc:0:cairn:enc:1:x")), plain, {
        runId: "esc",
        what: /input of run "esc"/,
      });
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });

  it.skipIf(backend !== "sqlite")(
    "createReleasedRun (SQLite): a plain payload of the release asked inside its transaction refuses the create whole",
    async () => {
      const cleanups: Array<() => Promise<void> | void> = [];
      try {
        const { plain } = await opened(backend, cleanups);
        const run = { ...newRun("c1", "-1"), claimBy: { workerId: "w", leaseMs: 60_000 } };
        await refused(
          plain.createReleasedRun!(run, () => ({
            status: "completed",
            output: '"SECRET"',
            readyAt: null,
          })),
          plain,
          { runId: "c1", what: /^the output of run "c1"$/ },
        );
        expect(await plain.getRun("c1")).toBeUndefined();
        // What it keeps plain passes: a run left claimed, or paused with a reason.
        const made = await plain.createReleasedRun!(run, () => ({
          status: "paused",
          reason: "a pause",
          readyAt: null,
        }));
        expect(made.run.status).toBe("paused");
      } finally {
        for (const c of cleanups.splice(0).reverse()) await c();
      }
    },
  );
});
