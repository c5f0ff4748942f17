// When a worker row's process may be declared dead: the pid is trusted only within our own
// PID namespace; anywhere else only a heartbeat older than a lease counts.

import { describe, expect, it } from "vitest";
import type { WorkerRecord } from "../store/store.js";
import { isDeadLocalWorker, type ThisProcess } from "./dead-workers.js";

const here: ThisProcess = {
  workerId: "wrk_me",
  host: "box",
  pid: 100,
  pidNamespace: "linux:boot-1:pidns:4026531836",
  now: 1_000_000,
  leaseMs: 30_000,
};

function row(over: Partial<WorkerRecord>): WorkerRecord {
  return {
    id: "wrk_other",
    host: "box",
    pid: 200,
    pidNamespace: here.pidNamespace,
    workflows: [],
    startedAt: here.now - 60_000,
    heartbeatAt: here.now - 1_000,
    ...over,
  };
}

const dead = () => false;
const alive = () => true;

describe("isDeadLocalWorker", () => {
  it("same namespace: a dead pid decides; a live one (perhaps reused) until the row is silent past a lease", () => {
    expect(isDeadLocalWorker(row({}), here, dead)).toBe(true);
    expect(isDeadLocalWorker(row({}), here, alive)).toBe(false);
    expect(isDeadLocalWorker(row({ heartbeatAt: here.now - 30_001 }), here, alive)).toBe(true);
    // Our own pid: another engine in this very process.
    expect(isDeadLocalWorker(row({ pid: 100, heartbeatAt: here.now - 30_001 }), here, dead)).toBe(
      false,
    );
  });

  it("another namespace (a container on host networking): a dead-looking pid proves nothing", () => {
    const other = row({ pidNamespace: "linux:boot-1:pidns:4026532999" });
    expect(isDeadLocalWorker(other, here, dead)).toBe(false);
    // Only a heartbeat older than a lease does.
    expect(isDeadLocalWorker({ ...other, heartbeatAt: here.now - 30_001 }, here, alive)).toBe(true);
    // A row written without an identity (an older cairn) is judged the same way.
    expect(isDeadLocalWorker(row({ pidNamespace: null }), here, dead)).toBe(false);
  });

  it("no identity on either side (no /proc): the hostname alone, as before", () => {
    const nowhere = { ...here, pidNamespace: null };
    expect(isDeadLocalWorker(row({ pidNamespace: null }), nowhere, dead)).toBe(true);
    expect(isDeadLocalWorker(row({ pidNamespace: null }), nowhere, alive)).toBe(false);
  });

  it("never this worker, another engine in this process, or another host", () => {
    expect(isDeadLocalWorker(row({ id: "wrk_me" }), here, dead)).toBe(false);
    expect(isDeadLocalWorker(row({ pid: 100 }), here, dead)).toBe(false);
    expect(isDeadLocalWorker(row({ host: "elsewhere", heartbeatAt: 0 }), here, dead)).toBe(false);
  });
});
