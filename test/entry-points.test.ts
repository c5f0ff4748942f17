// The package's entry points: the root loads no optional driver, and a third-party store
// built from "cairn/store" types alone passes the public contract suite.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { sqliteStore } from "../src/sqlite.js";
import type {
  ApprovalRecord,
  CancelOutcome,
  ClaimedRun,
  Clock,
  EventRecord,
  Journal,
  NewEvent,
  NewRun,
  Release,
  ReleaseOutcome,
  ResumeOutcome,
  RunFilter,
  RunRecord,
  RunWrite,
  SendEventOutcome,
  Store,
  StoreHint,
  WorkerRecord,
  WorkspaceObject,
  WriteOutcome,
} from "../src/store-api.js";
import { createSettableClock, describeStoreContract } from "../src/testing/store-contract.js";
import { spawnFixture } from "./helpers/child.js";

describe("the root entry", () => {
  it("does not load pg (an optional peer dependency only cairn/postgres needs)", async () => {
    const res = await spawnFixture("import-root.ts", []).done;
    expect(res.code, res.stderr).toBe(0);
    const seen = JSON.parse(res.stdout) as { exports: number; pg: boolean };
    expect(seen.exports).toBeGreaterThan(10);
    expect(seen.pg).toBe(false);
  });
});

/** A store written against cairn/store alone: it delegates to another store and counts
 *  calls, as a caching or metrics decorator would. */
class CountingStore implements Store {
  readonly calls = new Map<string, number>();
  constructor(private readonly inner: Store) {}
  get description(): string {
    return `counting(${this.inner.description})`;
  }
  private count(verb: string): void {
    this.calls.set(verb, (this.calls.get(verb) ?? 0) + 1);
  }
  open(o: { clock: Clock }): Promise<void> {
    this.count("open");
    return this.inner.open(o);
  }
  close(): Promise<void> {
    this.count("close");
    return this.inner.close();
  }
  now(): Promise<number> {
    return this.inner.now();
  }
  createRun(run: NewRun): Promise<{ run: RunRecord; created: boolean }> {
    this.count("createRun");
    return this.inner.createRun(run);
  }
  getRun(id: string): Promise<RunRecord | undefined> {
    return this.inner.getRun(id);
  }
  listRuns(filter?: RunFilter): Promise<RunRecord[]> {
    return this.inner.listRuns(filter);
  }
  claimRuns(p: Parameters<Store["claimRuns"]>[0]): Promise<ClaimedRun[]> {
    this.count("claimRuns");
    return this.inner.claimRuns(p);
  }
  renewLeases(p: Parameters<Store["renewLeases"]>[0]) {
    return this.inner.renewLeases(p);
  }
  expireLease(p: Parameters<Store["expireLease"]>[0]) {
    return this.inner.expireLease(p);
  }
  appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]> {
    this.count("appendRecords");
    return this.inner.appendRecords(writes);
  }
  releaseRun(r: Release): Promise<ReleaseOutcome> {
    return this.inner.releaseRun(r);
  }
  loadJournal(runId: string): Promise<Journal> {
    return this.inner.loadJournal(runId);
  }
  pendingEvents(runId: string): Promise<EventRecord[]> {
    return this.inner.pendingEvents(runId);
  }
  listEvents(runId: string): Promise<EventRecord[]> {
    return this.inner.listEvents(runId);
  }
  readEvents(p: Parameters<Store["readEvents"]>[0]): Promise<EventRecord[]> {
    return this.inner.readEvents(p);
  }
  readJournalPage(p: Parameters<Store["readJournalPage"]>[0]) {
    return this.inner.readJournalPage(p);
  }
  sendEvent(e: NewEvent): Promise<SendEventOutcome> {
    return this.inner.sendEvent(e);
  }
  requestCancel(...args: Parameters<Store["requestCancel"]>): Promise<CancelOutcome> {
    return this.inner.requestCancel(...args);
  }
  resumeRun(runId: string, p: Parameters<Store["resumeRun"]>[1]): Promise<ResumeOutcome> {
    return this.inner.resumeRun(runId, p);
  }
  forkRun(p: Parameters<Store["forkRun"]>[0]) {
    return this.inner.forkRun(p);
  }
  markUnserved(p: { served: string[]; graceMs: number }): Promise<number> {
    return this.inner.markUnserved(p);
  }
  registerWorker(w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">): Promise<void> {
    return this.inner.registerWorker(w);
  }
  heartbeatWorker(id: string): Promise<void> {
    return this.inner.heartbeatWorker(id);
  }
  removeWorker(id: string, options?: { expireLeases?: boolean }): Promise<void> {
    return this.inner.removeWorker(id, options);
  }
  listWorkers(): Promise<WorkerRecord[]> {
    return this.inner.listWorkers();
  }
  acquireRate(p: Parameters<Store["acquireRate"]>[0]): ReturnType<Store["acquireRate"]> {
    this.count("acquireRate");
    return this.inner.acquireRate(p);
  }
  settleRate(p: Parameters<Store["settleRate"]>[0]): Promise<void> {
    this.count("settleRate");
    return this.inner.settleRate(p);
  }
  blockRate(p: Parameters<Store["blockRate"]>[0]): Promise<void> {
    this.count("blockRate");
    return this.inner.blockRate(p);
  }
  appendStream(p: Parameters<Store["appendStream"]>[0]): ReturnType<Store["appendStream"]> {
    this.count("appendStream");
    return this.inner.appendStream(p);
  }
  readStream(p: Parameters<Store["readStream"]>[0]): ReturnType<Store["readStream"]> {
    this.count("readStream");
    return this.inner.readStream(p);
  }
  subscribe(listener: (hint: StoreHint) => void): () => void {
    return this.inner.subscribe(listener);
  }
  missingWorkspaceObjects(hashes: string[]): Promise<string[]> {
    return this.inner.missingWorkspaceObjects(hashes);
  }
  putWorkspaceObjects(p: Parameters<Store["putWorkspaceObjects"]>[0]) {
    this.count("putWorkspaceObjects");
    return this.inner.putWorkspaceObjects(p);
  }
  getWorkspaceObjects(hashes: string[]): Promise<WorkspaceObject[]> {
    return this.inner.getWorkspaceObjects(hashes);
  }
  heldWorkspaceObjects(runId: string, hashes: string[]): Promise<string[]> {
    return this.inner.heldWorkspaceObjects(runId, hashes);
  }
  deleteRun(runId: string) {
    return this.inner.deleteRun(runId);
  }
  deleteRuns(runIds: string[]) {
    return this.inner.deleteRuns(runIds);
  }
  requestApproval(p: Parameters<Store["requestApproval"]>[0]) {
    return this.inner.requestApproval(p);
  }
  answerApproval(p: Parameters<Store["answerApproval"]>[0]) {
    return this.inner.answerApproval(p);
  }
  listApprovals(runId: string): Promise<ApprovalRecord[]> {
    return this.inner.listApprovals(runId);
  }
}

describeStoreContract("a third-party store built from cairn/store types", async () => {
  const dir = mkdtempSync(join(tmpdir(), "cairn-third-party-"));
  return {
    store: new CountingStore(sqliteStore(join(dir, "cairn.db"))),
    clock: createSettableClock(),
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  };
});
