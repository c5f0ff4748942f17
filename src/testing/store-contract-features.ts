// The store contract for workspace objects, retention (deleteRun) and approvals: part of
// describeStoreContract (store-contract.ts), kept in a file of its own because these verbs
// came later and are read next to workspace-records.ts and approval-records.ts.

import { describe, expect, it } from "vitest";
import type { NewRun, ReleasedRun, RunRecord, StepRecord, Store } from "../store/store.js";
import type { WorkspaceObject } from "../store/workspace-records.js";

/** What the main suite shares with this part (getters: the store is new in every test). */
export interface FeatureContractHelpers {
  store(): Store;
  advance(ms: number): void;
  /** The clock's time when the test started. */
  t0: number;
  newRun(over?: Partial<NewRun>): NewRun;
  /** A created and claimed run. */
  started(over?: Partial<NewRun>): Promise<RunRecord>;
  release(
    run: Pick<RunRecord, "id" | "epoch">,
    over: Partial<Parameters<Store["releaseRun"]>[0]>,
  ): Promise<ReleasedRun>;
  step(runId: string, key: string, seq: number, over?: Partial<StepRecord>): StepRecord;
  /** Asserts a time equals `expected` within the backend's slack. */
  near(actual: number | null | undefined, expected: number): void;
  /** The bytes stored for object data of this length (StoreFixture.storedBytes). */
  storedBytes(dataLength: number): number;
}

const MINUTE = 60_000;

function object(text: string, kind: "blob" | "tree" = "blob"): WorkspaceObject {
  const data = new TextEncoder().encode(text);
  // Any lowercase hex works as an address here: the store never hashes.
  const hash = Buffer.from(`${kind}:${text}`).toString("hex").slice(0, 128).padEnd(16, "0");
  return { hash, kind, size: data.byteLength, data };
}

const bytes = (o: WorkspaceObject) => Buffer.from(o.data).toString("hex");

export function describeFeatureContract(h: FeatureContractHelpers): void {
  describe("workspace objects", () => {
    it("put, then missing and get: stored verbatim, once, in one transaction with the refs", async () => {
      const store = h.store();
      const run = await h.started();
      const binary: WorkspaceObject = {
        hash: "00ff".repeat(16),
        kind: "blob",
        size: 5,
        data: new Uint8Array([0, 255, 0, 10, 13]),
      };
      const a = object("alpha");
      const tree = object('[["a","f",420,"x",5]]', "tree");
      expect(await store.missingWorkspaceObjects([a.hash, binary.hash, a.hash])).toEqual([
        a.hash,
        binary.hash,
      ]);
      expect(
        await store.putWorkspaceObjects({
          runId: run.id,
          epoch: run.epoch,
          objects: [a, binary, tree],
          refs: [],
        }),
      ).toEqual({ ok: true });
      expect(await store.missingWorkspaceObjects([tree.hash, "abcd", a.hash])).toEqual(["abcd"]);
      const got = await store.getWorkspaceObjects([binary.hash, "abcd", a.hash, tree.hash]);
      const byHash = new Map(got.map((o) => [o.hash, o]));
      expect(got).toHaveLength(3);
      expect(bytes(byHash.get(binary.hash)!)).toBe("00ff000a0d");
      expect(byHash.get(a.hash)).toMatchObject({ kind: "blob", size: 5 });
      expect(byHash.get(tree.hash)).toMatchObject({ kind: "tree", size: tree.size });
      expect(Buffer.from(byHash.get(tree.hash)!.data).toString()).toBe('[["a","f",420,"x",5]]');
      expect(await store.getWorkspaceObjects([])).toEqual([]);
      expect(await store.missingWorkspaceObjects([])).toEqual([]);
    });

    it("held: the hashes a run refers to, in the order asked, and none of another run's", async () => {
      const store = h.store();
      const mine = await h.started();
      const theirs = await h.started();
      const a = object("mine");
      const b = object("theirs");
      const shared = object("both");
      expect(
        await store.putWorkspaceObjects({
          runId: mine.id,
          epoch: mine.epoch,
          objects: [a, shared],
          refs: [],
        }),
      ).toEqual({ ok: true });
      expect(
        await store.putWorkspaceObjects({
          runId: theirs.id,
          epoch: theirs.epoch,
          objects: [b],
          refs: [shared.hash],
        }),
      ).toEqual({ ok: true });
      expect(
        await store.heldWorkspaceObjects(mine.id, [shared.hash, b.hash, a.hash, "abcd", a.hash]),
      ).toEqual([shared.hash, a.hash]);
      expect(await store.heldWorkspaceObjects(theirs.id, [a.hash, b.hash, shared.hash])).toEqual([
        b.hash,
        shared.hash,
      ]);
      expect(await store.heldWorkspaceObjects("run_nope", [a.hash])).toEqual([]);
      expect(await store.heldWorkspaceObjects(mine.id, [])).toEqual([]);
    });

    it("an object stored once keeps its first content; putting it again is a no-op", async () => {
      const store = h.store();
      const run = await h.started();
      const a = object("first");
      const put = { runId: run.id, epoch: run.epoch, refs: [] };
      expect(await store.putWorkspaceObjects({ ...put, objects: [a] })).toEqual({ ok: true });
      const forged = { ...a, data: new TextEncoder().encode("other"), size: 5 };
      expect(await store.putWorkspaceObjects({ ...put, objects: [forged, a] })).toEqual({
        ok: true,
      });
      const [got] = await store.getWorkspaceObjects([a.hash]);
      expect(Buffer.from(got!.data).toString()).toBe("first");
    });

    it("is fenced by epoch: a stale writer stores nothing", async () => {
      const store = h.store();
      const run = await h.started();
      const a = object("zombie");
      expect(
        await store.putWorkspaceObjects({
          runId: run.id,
          epoch: run.epoch - 1,
          objects: [a],
          refs: [],
        }),
      ).toEqual({ ok: false, reason: "lease-lost" });
      expect(
        await store.putWorkspaceObjects({ runId: "run_nope", epoch: 1, objects: [a], refs: [] }),
      ).toEqual({ ok: false, reason: "lease-lost" });
      expect(await store.missingWorkspaceObjects([a.hash])).toEqual([a.hash]);
    });

    it("a ref to an object that is not stored is refused with its hash; nothing is written", async () => {
      const store = h.store();
      const run = await h.started();
      const a = object("sent");
      const gone = object("never stored");
      expect(
        await store.putWorkspaceObjects({
          runId: run.id,
          epoch: run.epoch,
          objects: [a],
          refs: [gone.hash, a.hash],
        }),
      ).toEqual({ ok: false, reason: "missing", hashes: [gone.hash] });
      expect(await store.missingWorkspaceObjects([a.hash])).toEqual([a.hash]);
      // A stored object can be referred to without sending it again.
      const other = await h.started();
      await store.putWorkspaceObjects({
        runId: other.id,
        epoch: other.epoch,
        objects: [a],
        refs: [],
      });
      expect(
        await store.putWorkspaceObjects({
          runId: run.id,
          epoch: run.epoch,
          objects: [],
          refs: [a.hash],
        }),
      ).toEqual({ ok: true });
    });
  });

  describe("event limits", () => {
    it("sendEvent refuses past maxEvents (all events) or maxPending (unconsumed), storing nothing", async () => {
      const store = h.store();
      const run = await h.started();
      const send = (name: string) =>
        store.sendEvent({ runId: run.id, name, payload: "1", maxEvents: 3, maxPending: 2 });
      const first = await send("a");
      expect(first.ok).toBe(true);
      expect((await send("b")).ok).toBe(true);
      expect(await send("c")).toEqual({ ok: false, reason: "limit", limit: "pending", count: 2 });
      if (!first.ok) throw new Error("unreachable");
      await store.appendRecords([
        { runId: run.id, epoch: run.epoch, consume: [{ eventSeq: first.event.seq, key: "w" }] },
      ]);
      expect((await send("c")).ok).toBe(true);
      expect(await send("d")).toEqual({ ok: false, reason: "limit", limit: "events", count: 3 });
      expect(await store.listEvents(run.id)).toHaveLength(3);
      // Without limits, nothing is counted.
      expect((await store.sendEvent({ runId: run.id, name: "e", payload: "1" })).ok).toBe(true);
    });
  });

  describe("trace context", () => {
    it("createRun and forkRun keep a run's traceparent as given; a run without one has null", async () => {
      const store = h.store();
      const traceContext = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
      const { run } = await store.createRun(h.newRun({ traceContext }));
      expect(run.traceContext).toBe(traceContext);
      expect((await store.getRun(run.id))?.traceContext).toBe(traceContext);
      const plain = await store.createRun(h.newRun());
      expect(plain.run.traceContext).toBeNull();
      const forked = await store.forkRun({
        sourceId: run.id,
        run: h.newRun({ traceContext: `${traceContext.slice(0, -2)}00` }),
        copy: [],
      });
      expect(forked.run.traceContext).toBe(`${traceContext.slice(0, -2)}00`);
    });
  });

  describe("handed input digest", () => {
    it("createRun keeps a child's digest as given, and answers an existing id with its own", async () => {
      const store = h.store();
      const parent = await store.createRun(h.newRun());
      const child = h.newRun({ parentId: parent.run.id, handedInputDigest: "digest-one" });
      const made = await store.createRun(child);
      expect(made.run.handedInputDigest).toBe("digest-one");
      expect((await store.getRun(child.id))?.handedInputDigest).toBe("digest-one");
      // A crashed parent's call asking again: the child as created, with the digest it
      // was created with (the call compares it with its own), untouched.
      const again = await store.createRun({ ...child, handedInputDigest: "digest-two" });
      expect(again.created).toBe(false);
      expect(again.run.handedInputDigest).toBe("digest-one");
      expect((await store.getRun(child.id))?.handedInputDigest).toBe("digest-one");
      expect(parent.run.handedInputDigest).toBeNull();
    });
  });

  describe("deleteRun", () => {
    it("a fork holds its source's workspace objects from its creation: deleting the source keeps them", async () => {
      const store = h.store();
      const src = await h.started();
      const a = object("checkpointed by the source");
      await store.putWorkspaceObjects({ runId: src.id, epoch: src.epoch, objects: [a], refs: [] });
      await store.appendRecords([
        { runId: src.id, epoch: src.epoch, steps: [h.step(src.id, "s", 0)] },
      ]);
      await h.release(src, { status: "completed", output: "1" });
      const { run: fork } = await store.forkRun({
        sourceId: src.id,
        run: h.newRun({ id: "run_fork_refs" }),
        copy: [{ key: "s", generation: 0 }],
      });
      expect(await store.heldWorkspaceObjects(fork.id, [a.hash])).toEqual([a.hash]);
      expect(await store.deleteRun(src.id)).toMatchObject({ deleted: true, objects: 0 });
      expect(await store.missingWorkspaceObjects([a.hash])).toEqual([]);
      expect(await store.heldWorkspaceObjects(fork.id, [a.hash])).toEqual([a.hash]);
    });

    it("refuses unknown and unfinished runs, changing nothing", async () => {
      const store = h.store();
      expect(await store.deleteRun("run_nope")).toEqual({ deleted: false, reason: "not-found" });
      const run = await h.started();
      expect(await store.deleteRun(run.id)).toEqual({
        deleted: false,
        reason: "not-finished",
        status: "running",
      });
      const waiting = await h.release(run, { status: "waiting", readyAt: null, waitingFor: ["x"] });
      expect(await store.deleteRun(run.id)).toMatchObject({ deleted: false, status: "waiting" });
      // A release answers the run but its input (ReleasedRun), which a store may leave out.
      const { input: _, ...stored } = (await store.getRun(run.id))!;
      const { input: _answered, ...released } = waiting as RunRecord;
      expect(stored).toEqual(released);
    });

    it("deletes the run and every record it owns; other runs keep theirs", async () => {
      const store = h.store();
      const keep = await h.started();
      const run = await h.started();
      for (const r of [keep, run]) {
        await store.appendRecords([
          {
            runId: r.id,
            epoch: r.epoch,
            steps: [h.step(r.id, "a", 0)],
            intents: [
              {
                runId: r.id,
                key: "w",
                kind: "wait",
                name: "w",
                data: "{}",
                createdAt: h.t0,
              },
            ],
            attempts: [
              {
                runId: r.id,
                key: "b",
                attempt: 1,
                generation: 0,
                startedAt: h.t0,
                endedAt: h.t0 + 1,
                error: { name: "Error", message: "x" },
                spend: {},
                retryAt: null,
              },
            ],
          },
        ]);
        await store.sendEvent({ runId: r.id, name: "e", payload: "1" });
        await store.appendStream({ runId: r.id, chunks: ["model said"] });
        await store.requestApproval({
          runId: r.id,
          epoch: r.epoch,
          key: "ok",
          name: "ok",
          request: "{}",
          requestedAt: h.t0,
          deadline: null,
          onTimeout: "reject",
        });
      }
      await h.release(run, { status: "completed", output: "1" });
      expect(await store.deleteRun(run.id)).toEqual({ deleted: true, objects: 0, bytes: 0 });
      expect(await store.getRun(run.id)).toBeUndefined();
      expect(await store.loadJournal(run.id)).toEqual({
        steps: [],
        attempts: [],
        intents: [],
        events: [],
      });
      expect(await store.listEvents(run.id)).toEqual([]);
      expect(await store.listApprovals(run.id)).toEqual([]);
      expect(await store.readStream({ runId: run.id, from: 0 })).toEqual([]);
      expect(await store.readStream({ runId: keep.id, from: 0 })).toHaveLength(1);
      const kept = await store.loadJournal(keep.id);
      expect([kept.steps.length, kept.attempts.length, kept.intents.length]).toEqual([1, 1, 1]);
      expect(await store.listEvents(keep.id)).toHaveLength(1);
      expect(await store.listApprovals(keep.id)).toHaveLength(1);
      expect(await store.deleteRun(run.id)).toEqual({ deleted: false, reason: "not-found" });
    });

    it("keeps a finished run whose child runs remain, as deleteRuns does, naming the children", async () => {
      // A child's id is derived from its parent's: a run started later under the parent's
      // id would adopt a child left behind.
      const store = h.store();
      const parent = await h.started();
      const done = await h.started({ id: `${parent.id}/b`, parentId: parent.id });
      const live = await h.started({ id: `${parent.id}/a`, parentId: parent.id });
      await h.release(done, { status: "completed", output: "1" });
      await h.release(parent, { status: "failed", error: { name: "Error", message: "x" } });
      const refused = { deleted: false, reason: "has-children", children: [live.id, done.id] };
      expect(await store.deleteRun(parent.id)).toEqual(refused);
      expect(await store.deleteRuns([parent.id])).toEqual({ deleted: [], objects: 0, bytes: 0 });
      expect((await store.getRun(parent.id))?.status).toBe("failed");
      await h.release(live, { status: "canceled" });
      expect(await store.deleteRun(parent.id)).toEqual(refused);
      expect(await store.deleteRun(done.id)).toMatchObject({ deleted: true });
      expect(await store.deleteRun(live.id)).toMatchObject({ deleted: true });
      expect(await store.deleteRun(parent.id)).toEqual({ deleted: true, objects: 0, bytes: 0 });
    });

    it("deleteRun keeps a finished child whose parent is unfinished, naming the parent", async () => {
      const store = h.store();
      const parent = await h.started();
      const child = await h.started({ id: `${parent.id}/kid`, parentId: parent.id });
      await h.release(child, { status: "completed", output: "1" });
      expect(await store.deleteRun(child.id)).toEqual({
        deleted: false,
        reason: "parent-unfinished",
        parentId: parent.id,
        parentStatus: "running",
      });
      expect((await store.getRun(child.id))?.status).toBe("completed");
      await h.release(parent, { status: "failed", error: { name: "Error", message: "x" } });
      expect(await store.deleteRun(child.id)).toMatchObject({ deleted: true });
      expect(await store.deleteRun(parent.id)).toMatchObject({ deleted: true });
    });

    it("deleteRuns keeps a finished child whose parent is unfinished (it may be about to read its outcome)", async () => {
      const store = h.store();
      const parent = await h.started();
      const child = await h.started({ id: `${parent.id}/kid`, parentId: parent.id });
      await h.release(child, { status: "completed", output: "1" });
      expect(await store.deleteRuns([child.id])).toEqual({ deleted: [], objects: 0, bytes: 0 });
      expect((await store.getRun(child.id))?.status).toBe("completed");
      await h.release(parent, { status: "failed", error: { name: "Error", message: "x" } });
      expect((await store.deleteRuns([child.id, parent.id])).deleted.sort()).toEqual(
        [child.id, parent.id].sort(),
      );
    });

    it("deleteRuns: deletes the finished runs of a batch at once, skips the others, prunes only objects nobody holds", async () => {
      const store = h.store();
      const a = await h.started();
      const b = await h.started();
      const live = await h.started();
      const shared = object("held by a and by a live run");
      const onlyB = object("held by b alone");
      await store.putWorkspaceObjects({ runId: a.id, epoch: a.epoch, objects: [shared], refs: [] });
      await store.putWorkspaceObjects({
        runId: live.id,
        epoch: live.epoch,
        objects: [],
        refs: [shared.hash],
      });
      await store.putWorkspaceObjects({ runId: b.id, epoch: b.epoch, objects: [onlyB], refs: [] });
      await store.appendRecords([{ runId: a.id, epoch: a.epoch, steps: [h.step(a.id, "s", 0)] }]);
      await store.appendStream({ runId: a.id, chunks: ["x"] });
      await h.release(a, { status: "completed", output: "1" });
      await h.release(b, { status: "canceled" });
      const res = await store.deleteRuns([a.id, live.id, "run_nope", b.id, a.id]);
      expect([...res.deleted].sort()).toEqual([a.id, b.id].sort());
      expect(res).toMatchObject({ objects: 1, bytes: h.storedBytes(onlyB.data.byteLength) });
      expect(await store.getRun(a.id)).toBeUndefined();
      expect(await store.getRun(b.id)).toBeUndefined();
      expect((await store.loadJournal(a.id)).steps).toEqual([]);
      expect(await store.readStream({ runId: a.id, from: 0 })).toEqual([]);
      expect((await store.getRun(live.id))?.status).toBe("running");
      expect(await store.missingWorkspaceObjects([shared.hash, onlyB.hash])).toEqual([onlyB.hash]);
      expect(await store.deleteRuns([])).toEqual({ deleted: [], objects: 0, bytes: 0 });
      await expect(
        store.deleteRuns(Array.from({ length: 1001 }, (_, i) => `r${i}`)),
      ).rejects.toThrow(/at most 1000 a call/);
    });

    it("a run created later under a deleted run's id starts above the deleted run's epoch", async () => {
      // A worker stalled past its lease may still send a write fenced with the old epoch.
      const store = h.store();
      for (const remove of [
        (id: string) => store.deleteRuns([id]),
        (id: string) => store.deleteRun(id),
      ]) {
        const run = await h.started();
        await h.release(run, { status: "completed", output: "1" });
        await remove(run.id);
        const { run: again } = await store.createRun(
          h.newRun({ id: run.id, claimBy: { workerId: "w-new", leaseMs: 60_000 } }),
        );
        expect(again.epoch).toBeGreaterThan(run.epoch);
        const stale = await store.appendRecords([
          { runId: run.id, epoch: run.epoch, steps: [h.step(run.id, "late", 0)] },
        ]);
        expect(stale).toEqual([{ ok: false, reason: "lease-lost" }]);
        await h.release(again, { status: "completed", output: "2" });
      }
    });

    it("prunes the objects no remaining run holds, and only those", async () => {
      const store = h.store();
      const a = await h.started();
      const b = await h.started();
      const shared = object("shared by a and b");
      const onlyA = object("only a holds this");
      const onlyB = object("only b");
      await store.putWorkspaceObjects({
        runId: a.id,
        epoch: a.epoch,
        objects: [shared, onlyA],
        refs: [],
      });
      await store.putWorkspaceObjects({
        runId: b.id,
        epoch: b.epoch,
        objects: [onlyB],
        refs: [shared.hash],
      });
      await h.release(a, { status: "failed", error: { name: "Error", message: "x" } });
      await h.release(b, { status: "canceled" });
      expect(await store.deleteRun(a.id)).toEqual({
        deleted: true,
        objects: 1,
        bytes: h.storedBytes(onlyA.data.byteLength),
      });
      expect(await store.missingWorkspaceObjects([shared.hash, onlyA.hash, onlyB.hash])).toEqual([
        onlyA.hash,
      ]);
      expect(await store.deleteRun(b.id)).toEqual({
        deleted: true,
        objects: 2,
        bytes: h.storedBytes(shared.data.byteLength) + h.storedBytes(onlyB.data.byteLength),
      });
      expect(await store.missingWorkspaceObjects([shared.hash, onlyB.hash])).toEqual([
        shared.hash,
        onlyB.hash,
      ]);
    });
  });

  describe("approvals", () => {
    const request = (run: RunRecord, over: Partial<Parameters<Store["requestApproval"]>[0]> = {}) =>
      h.store().requestApproval({
        runId: run.id,
        epoch: run.epoch,
        key: "review",
        name: "review",
        request: '{"diff":"+1"}',
        requestedAt: h.t0,
        deadline: h.t0 + 10 * MINUTE,
        onTimeout: "reject",
        ...over,
      });
    const answer = (run: RunRecord, over: Partial<Parameters<Store["answerApproval"]>[0]> = {}) =>
      h.store().answerApproval({
        runId: run.id,
        key: "review",
        decision: "approved",
        answeredBy: "alice",
        comment: "ship it",
        answer: null,
        via: "cli",
        tokenId: null,
        event: { name: "cairn.approval:review", payload: '"yes"' },
        ...over,
      });

    it("requestApproval stores a pending approval once, fenced by epoch", async () => {
      const store = h.store();
      const run = await h.started();
      expect(await request(run, { epoch: run.epoch + 1 })).toEqual({
        ok: false,
        reason: "lease-lost",
      });
      expect(await store.listApprovals(run.id)).toEqual([]);
      const first = await request(run);
      expect(first).toMatchObject({ ok: true, created: true });
      const again = await request(run, { request: '"other"', deadline: null });
      expect(again).toMatchObject({ ok: true, created: false });
      const expected = {
        runId: run.id,
        key: "review",
        name: "review",
        request: '{"diff":"+1"}',
        requestedAt: h.t0,
        deadline: h.t0 + 10 * MINUTE,
        onTimeout: "reject",
        status: "pending",
        answeredAt: null,
        answeredBy: null,
        comment: null,
        answer: null,
        via: null,
        tokenId: null,
      };
      if (!again.ok) throw new Error("refused");
      expect(again.approval).toEqual(expected);
      await request(run, { key: "deploy", name: "deploy", deadline: null });
      expect((await store.listApprovals(run.id)).map((a) => a.key)).toEqual(["review", "deploy"]);
    });

    it("answerApproval decides once, stores the event and wakes the run waiting for it", async () => {
      const store = h.store();
      const run = await h.started();
      await request(run);
      await h.release(run, {
        status: "waiting",
        readyAt: null,
        waitingFor: ["cairn.approval:review"],
      });
      h.advance(MINUTE);
      const res = await answer(run, { answer: '{"n":1}', tokenId: "tok_1", via: "link" });
      if (!res.ok) throw new Error(`refused: ${res.reason}`);
      expect(res.approval).toMatchObject({
        status: "approved",
        answeredBy: "alice",
        comment: "ship it",
        answer: '{"n":1}',
        via: "link",
        tokenId: "tok_1",
      });
      h.near(res.approval.answeredAt, h.t0 + MINUTE);
      const events = await store.listEvents(run.id);
      expect(events.map((e) => [e.name, e.payload])).toEqual([["cairn.approval:review", '"yes"']]);
      expect(events[0]?.createdAt).toBe(res.approval.answeredAt);
      const woken = await store.getRun(run.id);
      h.near(woken?.readyAt, h.t0 + MINUTE);

      const second = await answer(run, { decision: "rejected", answeredBy: "mallory" });
      expect(second).toMatchObject({ ok: false, reason: "decided" });
      expect(await store.listEvents(run.id)).toHaveLength(1);
      expect((await store.listApprovals(run.id))[0]).toEqual(res.approval);
    });

    it("refuses an answer at or after the deadline, for a finished run, or for no approval", async () => {
      const store = h.store();
      const run = await h.started();
      await request(run);
      expect(await answer(run, { key: "nope" })).toEqual({ ok: false, reason: "not-found" });
      expect(await answer({ ...run, id: "run_nope" })).toEqual({ ok: false, reason: "not-found" });
      h.advance(10 * MINUTE);
      expect(await answer(run)).toMatchObject({ ok: false, reason: "expired" });

      const other = await h.started();
      await request(other, { deadline: null });
      await h.release(other, { status: "canceled" });
      expect(await answer(other)).toMatchObject({
        ok: false,
        reason: "finished",
        status: "canceled",
      });
      expect(await store.listEvents(run.id)).toEqual([]);
      expect(await store.listEvents(other.id)).toEqual([]);
      expect((await store.listApprovals(other.id))[0]?.status).toBe("pending");
    });

    it("answerApproval given runCreatedAt answers only the run created then (not another under its id)", async () => {
      const store = h.store();
      const run = await h.started();
      await request(run, { deadline: null });
      const created = Math.floor(run.createdAt);
      expect(await answer(run, { runCreatedAt: created - 1 })).toEqual({
        ok: false,
        reason: "other-run",
      });
      expect(await store.listEvents(run.id)).toEqual([]);
      expect((await store.listApprovals(run.id))[0]?.status).toBe("pending");
      expect(await answer(run, { runCreatedAt: created })).toMatchObject({
        ok: true,
        approval: { status: "approved" },
      });
    });

    it("answerApproval given an asking answers only that asking (failedCalls of its key)", async () => {
      const store = h.store();
      const run = await h.started();
      await request(run, { deadline: null });
      expect(await answer(run, { asking: 1 })).toMatchObject({
        ok: false,
        reason: "other-asking",
        asking: 0,
        approval: { status: "pending" },
      });
      expect(await store.listEvents(run.id)).toEqual([]);
      // The call failed the run; a resume asks it anew: its second asking (1).
      await h.release(run, {
        status: "failed",
        error: { name: "Error", message: "refused answer" },
        failedKeys: ["review"],
      });
      expect(await store.resumeRun(run.id, {})).toMatchObject({ ok: true });
      const claimed = await store.claimRuns({
        workerId: "worker-1",
        workflows: [`${run.workflow}@${run.version}`],
        limit: 100,
        leaseMs: MINUTE,
      });
      expect(claimed.map((c) => c.run.id)).toEqual([run.id]);
      expect(await answer(run, { asking: 0 })).toMatchObject({
        ok: false,
        reason: "other-asking",
        asking: 1,
      });
      expect((await store.listApprovals(run.id))[0]?.status).toBe("pending");
      expect(await answer(run, { asking: 1 })).toMatchObject({
        ok: true,
        approval: { status: "approved" },
      });
    });

    it("listRuns({ waitingForEventPrefix }): waiting runs that wait for such an event", async () => {
      const store = h.store();
      const asking = await h.started();
      const other = await h.started();
      const running = await h.started();
      await h.release(asking, {
        status: "waiting",
        readyAt: null,
        waitingFor: ["go", "cairn.approval:review"],
      });
      await h.release(other, { status: "waiting", readyAt: null, waitingFor: ["cairn.child:x"] });
      const ids = (runs: RunRecord[]) => runs.map((r) => r.id);
      expect(ids(await store.listRuns({ waitingForEventPrefix: "cairn.approval:" }))).toEqual([
        asking.id,
      ]);
      expect(ids(await store.listRuns({ waitingForEventPrefix: "cairn." }))).toEqual([
        other.id,
        asking.id,
      ]);
      expect(ids(await store.listRuns({ waitingForEventPrefix: "%" }))).toEqual([]);
      expect(running.status).toBe("running");
    });
  });
}
