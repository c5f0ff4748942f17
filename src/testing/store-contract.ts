// The contract every Store backend passes: one suite, run against SQLite and PostgreSQL,
// so "the store" means the same thing whichever backend is underneath. Each test asserts
// a documented promise of src/store/store.ts and would fail if that promise broke.
//
// It is one file on purpose: the suite is the executable specification of store.ts and is
// read top to bottom next to it; splitting it would scatter one specification.
//
// Time: backends take their notion of now from the Clock given to open(). The suite's clock
// is virtual, so both SQLite and PostgreSQL (which passes any clock's reading into SQL, and
// uses the database's own clock only for a clock marked `system`) record its reading
// exactly. Assertions on times still allow SLACK_MS, so that a third-party backend that
// derives its time from another source can pass, and tests move the clock in steps far
// larger than that.

import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CairnError } from "../errors.js";
import type { Clock } from "../lib/clock.js";
import type {
  AttemptRecord,
  ClaimedRun,
  EventRecord,
  IntentRecord,
  Journal,
  NewRun,
  Release,
  ReleasedRun,
  RunRecord,
  StepRecord,
  Store,
  StoreHint,
} from "../store/store.js";
import { describeFeatureContract } from "./store-contract-features.js";
import { describePageContract } from "./store-contract-pages.js";

/** A Clock whose time only moves when the test says so. */
export interface VirtualClockLike extends Clock {
  set(ms: number): void;
}

export interface StoreFixture {
  /** A store on fresh, empty storage, NOT yet opened: the suite opens it with `clock`. */
  store: Store;
  clock: VirtualClockLike;
  /** Removes the storage (temp dir, schema) after the store was closed. */
  cleanup: () => Promise<void>;
  /** The bytes the storage holds for a workspace object's data of this length (what
   *  deleteRun reports). Default: the length itself; a store that transforms data (as
   *  encryptedStore does) says how it grows. */
  storedBytes?: (dataLength: number) => number;
  /** The store encrypts every payload it is given (encryptedStore): marked, it never
   *  refuses one. Default false: marked, it refuses a payload given in plain text. */
  encrypts?: boolean;
}

/** 2023-11-14T22:13:20Z: any fixed instant works; a fixed one keeps failures reproducible. */
export const CONTRACT_T0 = 1_700_000_000_000;

/** How far a backend's times may drift from the clock's within one test (see header). */
const SLACK_MS = 5_000;
const MINUTE = 60_000;
const LEASE_MS = MINUTE;

/** A settable clock: sleepers wake when set() moves time past their deadline. */
export function createSettableClock(startMs = CONTRACT_T0): VirtualClockLike {
  let now = startMs;
  const sleepers = new Set<{ until: number; wake: () => void }>();
  const advanceListeners = new Set<() => void>();
  return {
    now: () => now,
    sleep(ms: number, signal?: AbortSignal): Promise<void> {
      return new Promise((resolve, reject) => {
        if (signal?.aborted) {
          reject(signal.reason);
          return;
        }
        const sleeper = {
          until: now + ms,
          wake: () => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
          },
        };
        const onAbort = () => {
          sleepers.delete(sleeper);
          reject(signal?.reason);
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        if (ms <= 0) sleeper.wake();
        else sleepers.add(sleeper);
      });
    },
    set(ms: number): void {
      const forward = ms > now;
      now = ms;
      for (const s of [...sleepers]) {
        if (s.until <= now) {
          sleepers.delete(s);
          s.wake();
        }
      }
      if (forward) for (const fn of [...advanceListeners]) fn();
    },
    onAdvance(fn: () => void): () => void {
      advanceListeners.add(fn);
      return () => advanceListeners.delete(fn);
    },
  };
}

function expectNear(actual: number | null | undefined, expected: number): void {
  expect(actual).toBeTypeOf("number");
  expect(Math.abs((actual as number) - expected)).toBeLessThanOrEqual(SLACK_MS);
}

/** Waits for a condition with a bound: hints may arrive asynchronously (LISTEN/NOTIFY). */
async function waitFor(cond: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const byKey = <T extends { key: string }>(xs: T[]): T[] =>
  [...xs].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));

const sortAttempts = (xs: AttemptRecord[]): AttemptRecord[] =>
  [...xs].sort(
    (a, b) =>
      a.generation - b.generation ||
      (a.key < b.key ? -1 : a.key > b.key ? 1 : 0) ||
      a.attempt - b.attempt,
  );

export function describeStoreContract(name: string, makeStore: () => Promise<StoreFixture>): void {
  describe(`Store contract: ${name}`, () => {
    let store: Store;
    let clock: VirtualClockLike;
    let cleanup: () => Promise<void>;
    let storedBytes: (dataLength: number) => number = (n) => n;
    let encrypts = false;
    let counter = 0;

    beforeEach(async () => {
      const fixture = await makeStore();
      store = fixture.store;
      clock = fixture.clock;
      cleanup = fixture.cleanup;
      storedBytes = fixture.storedBytes ?? ((n) => n);
      encrypts = fixture.encrypts ?? false;
      clock.set(CONTRACT_T0);
      await store.open({ clock });
    });

    afterEach(async () => {
      await store.close();
      await cleanup();
    });

    // ---- fixtures ----

    const advance = (ms: number) => clock.set(clock.now() + ms);

    function newRun(over: Partial<NewRun> = {}): NewRun {
      counter += 1;
      return {
        id: `run_${counter}`,
        workflow: "alpha",
        version: "1",
        input: `{"n":${counter}}`,
        budgetLimit: {},
        ...over,
      };
    }

    function step(runId: string, key: string, seq: number, over: Partial<StepRecord> = {}) {
      const rec: StepRecord = {
        runId,
        key,
        generation: 0,
        seq,
        name: `name-${key}`,
        kind: "step",
        outcome: "ok",
        result: `"result-${key}"`,
        error: null,
        spend: {},
        attempt: 1,
        startedAt: CONTRACT_T0 + seq,
        completedAt: CONTRACT_T0 + seq + 1,
        delivery: seq,
        issuedAfter: seq,
        issuedLate: false,
        ...over,
      };
      return rec;
    }

    function attempt(runId: string, key: string, n: number, over: Partial<AttemptRecord> = {}) {
      const rec: AttemptRecord = {
        runId,
        key,
        attempt: n,
        generation: 0,
        startedAt: CONTRACT_T0 + n,
        endedAt: CONTRACT_T0 + n + 1,
        error: { name: "Error", message: `attempt ${n} failed` },
        spend: {},
        retryAt: CONTRACT_T0 + 1_000,
        ...over,
      };
      return rec;
    }

    function intent(runId: string, key: string, over: Partial<IntentRecord> = {}) {
      const rec: IntentRecord = {
        runId,
        key,
        kind: "effect",
        name: `effect-${key}`,
        data: `{"intent":"${key}"}`,
        createdAt: CONTRACT_T0,
        ...over,
      };
      return rec;
    }

    /** Claims every ready run of `workflows` for `workerId` and returns the one with `id`. */
    async function claim(
      id: string,
      workerId = "worker-1",
      workflows = ["alpha@1"],
    ): Promise<ClaimedRun> {
      const claimed = await store.claimRuns({ workerId, workflows, limit: 100, leaseMs: LEASE_MS });
      const mine = claimed.find((c) => c.run.id === id);
      if (!mine) throw new Error(`run "${id}" was not claimed`);
      return mine;
    }

    /** A created and claimed run: the common starting point of a journal write. Claims
     *  exactly that run (a test that leaves other ready runs of its workflow is wrong). */
    async function started(over: Partial<NewRun> = {}): Promise<RunRecord> {
      const { run } = await store.createRun(newRun(over));
      const claimed = await store.claimRuns({
        workerId: "worker-1",
        workflows: [`${run.workflow}@${run.version}`],
        limit: 100,
        leaseMs: LEASE_MS,
      });
      expect(claimed.map((c) => c.run.id)).toEqual([run.id]);
      return claimed[0]!.run;
    }

    async function mustGet(id: string): Promise<RunRecord> {
      const run = await store.getRun(id);
      if (!run) throw new Error(`run "${id}" not found`);
      return run;
    }

    async function release(
      run: Pick<RunRecord, "id" | "epoch">,
      over: Partial<Parameters<Store["releaseRun"]>[0]>,
    ) {
      const out = await store.releaseRun({
        runId: run.id,
        epoch: run.epoch,
        status: "pending",
        readyAt: null,
        ...over,
      });
      if (!out.ok) throw new Error(`release of "${run.id}" lost its lease`);
      return out.run;
    }

    const ids = (runs: RunRecord[]) => runs.map((r) => r.id);
    const butInput = (run: ReleasedRun | undefined) => {
      if (run === undefined) return undefined;
      const { input: _, ...rest } = run as RunRecord;
      return rest;
    };

    // Paged reads of a run's journal and events: store-contract-pages.ts.
    describePageContract({ store: () => store, started, step, attempt, intent });

    // Workspace objects, deleteRun and approvals: store-contract-features.ts.
    describeFeatureContract({
      store: () => store,
      advance,
      t0: CONTRACT_T0,
      newRun,
      started,
      release,
      step,
      near: expectNear,
      storedBytes: (n) => storedBytes(n),
    });

    // ---- lifecycle ----

    describe("open / close / now", () => {
      it("now() is the clock's time", async () => {
        expectNear(await store.now(), CONTRACT_T0);
        advance(10 * MINUTE);
        expectNear(await store.now(), CONTRACT_T0 + 10 * MINUTE);
      });

      it("counts openers: the store stays usable until the last one closes", async () => {
        await store.open({ clock });
        await store.close();
        const { created } = await store.createRun(newRun());
        expect(created).toBe(true);
      });

      it("a create or release asked for after close() is refused, even if the store is opened again at once", async () => {
        const kept = await started();
        await store.close();
        const lateCreate = newRun();
        const created = store.createRun(lateCreate);
        const released = store.releaseRun({
          runId: kept.id,
          epoch: kept.epoch,
          status: "completed",
          output: "1",
          readyAt: null,
        });
        // Swallowed here, checked below: a closed store must not leave them unheard.
        created.catch(() => {});
        released.catch(() => {});
        await store.open({ clock });
        await expect(created).rejects.toThrow(/not open/);
        await expect(released).rejects.toThrow(/not open/);
        expect(await store.getRun(lateCreate.id)).toBeUndefined();
        expect((await store.getRun(kept.id))?.status).toBe("running");
      });
    });

    // ---- the encryption mark (optional verbs) ----

    describe("markEncrypted", () => {
      it("a marked store refuses a plain payload, writing nothing; ciphertext and an unmarked store pass", async () => {
        // A store without the mark verbs is never marked: nothing to refuse.
        if (!store.markEncrypted || !store.unmarkEncrypted) return;
        const run = await started();
        await store.markEncrypted();
        if (encrypts) {
          // What it is given in plain text it stores encrypted: nothing to refuse.
          expect((await store.createRun(newRun({ input: '"secret"' }))).created).toBe(true);
          await store.unmarkEncrypted();
          return;
        }
        try {
          const plain = newRun({ input: '"secret"' });
          await expect(store.createRun(plain)).rejects.toMatchObject({
            code: "ENCRYPTION_KEY_MISSING",
            runId: plain.id,
          });
          expect(await store.getRun(plain.id)).toBeUndefined();
          await expect(
            store.sendEvent({ runId: run.id, name: "e", payload: '"secret"' }),
          ).rejects.toMatchObject({ code: "ENCRYPTION_KEY_MISSING", runId: run.id });
          expect(await store.listEvents(run.id)).toEqual([]);
          await expect(
            store.appendRecords([
              { runId: run.id, epoch: run.epoch, steps: [step(run.id, "s", 1)] },
            ]),
          ).rejects.toMatchObject({ code: "ENCRYPTION_KEY_MISSING", runId: run.id, key: "s" });
          expect((await store.loadJournal(run.id)).steps).toEqual([]);
          // What an encryptedStore writes passes (an envelope of version 1).
          const sealed = newRun({ input: "cairn:enc:1:k1:AAAA" });
          expect((await store.createRun(sealed)).created).toBe(true);
        } finally {
          await store.unmarkEncrypted();
        }
        expect((await store.createRun(newRun({ input: '"plain"' }))).created).toBe(true);
      });
    });

    // ---- runs ----

    describe("createRun / getRun", () => {
      it("inserts a pending run that is ready now, with empty state", async () => {
        const input = newRun({ budgetLimit: { tokens: 1000, usd: 2.5 } });
        const { run, created } = await store.createRun(input);
        expect(created).toBe(true);
        expect(run).toMatchObject({
          id: input.id,
          workflow: "alpha",
          version: "1",
          status: "pending",
          reason: null,
          pausedFor: null,
          input: input.input,
          output: null,
          error: null,
          budgetLimit: { tokens: 1000, usd: 2.5 },
          budgetSpent: {},
          parentId: null,
          wakeAt: null,
          waitingFor: [],
          leaseOwner: null,
          leaseUntil: null,
          cancelRequested: false,
        });
        expect(run.epoch).toBeTypeOf("number");
        expect(run.generation).toBeTypeOf("number");
        expectNear(run.readyAt, CONTRACT_T0);
        expectNear(run.createdAt, CONTRACT_T0);
        expectNear(run.updatedAt, CONTRACT_T0);
        expect(await store.getRun(input.id)).toEqual(run);
      });

      it("stores the parent id", async () => {
        const { run: parent } = await store.createRun(newRun());
        const { run } = await store.createRun(newRun({ parentId: parent.id }));
        expect(run.parentId).toBe(parent.id);
        expect((await mustGet(run.id)).parentId).toBe(parent.id);
      });

      it("is idempotent on id: created=false, the existing run unchanged", async () => {
        const first = await store.createRun(newRun({ id: "run_same" }));
        advance(MINUTE);
        const second = await store.createRun(
          newRun({ id: "run_same", workflow: "other", version: "9", input: '"x"' }),
        );
        expect(second.created).toBe(false);
        expect(second.run).toEqual(first.run);
        expect(await store.getRun("run_same")).toEqual(first.run);
        expect(await store.listRuns()).toHaveLength(1);
      });

      it("with claimBy: creates the run claimed by that worker, as a claim would leave it", async () => {
        const { run: pendingRun } = await store.createRun(newRun());
        const input = newRun();
        const { run, created } = await store.createRun({
          ...input,
          claimBy: { workerId: "worker-1", leaseMs: LEASE_MS },
        });
        expect(created).toBe(true);
        expect(run).toMatchObject({ id: input.id, status: "running", leaseOwner: "worker-1" });
        // The same epoch a claim of a pending run reaches: its writes are fenced alike.
        expect(run.epoch).toBe(pendingRun.epoch + 1);
        expectNear(run.leaseUntil, CONTRACT_T0 + LEASE_MS);
        expect(run.readyAt).toBe(run.leaseUntil);
        expect(await store.getRun(input.id)).toEqual(run);
        // Leased: no other worker claims it until the lease runs out, then as a crash.
        const others = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(others.map((c) => c.run.id)).toEqual([pendingRun.id]);
        advance(LEASE_MS + 1);
        const taken = await claim(input.id, "worker-2");
        expect(taken.recovered).toBe(true);
        expect(taken.run.epoch).toBe(run.epoch + 1);
        const stale = await store.releaseRun({
          runId: run.id,
          epoch: run.epoch,
          status: "completed",
          output: '"late"',
          readyAt: null,
        });
        expect(stale).toEqual({ ok: false, reason: "lease-lost" });
      });

      it("with claimBy, an existing id is returned untouched and not claimed", async () => {
        const first = await store.createRun(newRun({ id: "run_taken" }));
        advance(MINUTE);
        const second = await store.createRun({
          ...newRun({ id: "run_taken" }),
          claimBy: { workerId: "worker-1", leaseMs: LEASE_MS },
        });
        expect(second.created).toBe(false);
        expect(second.run).toEqual(first.run);
        expect(await store.getRun("run_taken")).toEqual(first.run);
      });

      it("refuses NaN and Infinity as a lease, a readyAt or a wakeAt, by name, writing nothing", async () => {
        await expect(
          store.createRun({
            ...newRun({ id: "run_inf" }),
            claimBy: { workerId: "w", leaseMs: Infinity },
          }),
        ).rejects.toThrow(/createRun: run "run_inf": claimBy.leaseMs is Infinity/);
        expect(await store.getRun("run_inf")).toBeUndefined();
        const { run } = await store.createRun({
          ...newRun(),
          claimBy: { workerId: "worker-1", leaseMs: LEASE_MS },
        });
        for (const [field, r] of [
          ["readyAt", { readyAt: Number.NaN }],
          ["wakeAt", { readyAt: null, wakeAt: Number.POSITIVE_INFINITY }],
        ] as const) {
          await expect(
            store.releaseRun({ runId: run.id, epoch: run.epoch, status: "waiting", ...r }),
            field,
          ).rejects.toThrow(new RegExp(`releaseRun: run "${run.id}": ${field} is`));
        }
        // NaN stored would be a waiting run with no timer, never woken: it is still running.
        expect((await store.getRun(run.id))?.status).toBe("running");
      });

      it("refuses text with a lone surrogate by run and field (a store would change it)", async () => {
        const cut = "\ud83d";
        await expect(
          store.createRun(newRun({ id: "run_cut", input: `"a${cut}"` })),
        ).rejects.toThrow(/createRun: run "run_cut": input contains a lone surrogate/);
        expect(await store.getRun("run_cut")).toBeUndefined();
        const { run } = await store.createRun({
          ...newRun(),
          claimBy: { workerId: "worker-1", leaseMs: LEASE_MS },
        });
        const releases: Array<[string, Partial<Release>]> = [
          ["output", { status: "completed", output: `"x${cut}"` }],
          ["waitingFor\\[1\\]", { status: "waiting", waitingFor: ["go", `go${cut}`] }],
          ["failedKeys\\[1\\]", { status: "failed", failedKeys: ["a", `a${cut}`] }],
        ];
        for (const [field, r] of releases) {
          await expect(
            store.releaseRun({
              runId: run.id,
              epoch: run.epoch,
              status: "completed",
              readyAt: null,
              ...r,
            }),
            field,
          ).rejects.toThrow(
            new RegExp(`releaseRun: run "${run.id}": ${field} contains a lone surrogate`),
          );
        }
        expect((await store.getRun(run.id))?.status).toBe("running");
      });

      it("getRun of an unknown id is undefined", async () => {
        expect(await store.getRun("run_nope")).toBeUndefined();
      });
    });

    describe("listRuns", () => {
      // r1..r4 created a minute apart; r2 is canceled, r4 is running.
      async function seed() {
        const r1 = (await store.createRun(newRun({ workflow: "alpha" }))).run;
        advance(MINUTE);
        const r2 = (await store.createRun(newRun({ workflow: "beta", parentId: r1.id }))).run;
        advance(MINUTE);
        const r3 = (await store.createRun(newRun({ workflow: "alpha" }))).run;
        advance(MINUTE);
        const r4 = (await store.createRun(newRun({ workflow: "beta" }))).run;
        await store.requestCancel(r2.id, "not needed");
        await claim(r4.id, "worker-1", ["beta@1"]);
        return { r1, r2, r3, r4 };
      }

      it("returns every run, newest first", async () => {
        const { r1, r2, r3, r4 } = await seed();
        expect(ids(await store.listRuns())).toEqual([r4.id, r3.id, r2.id, r1.id]);
        expect(ids(await store.listRuns({}))).toEqual([r4.id, r3.id, r2.id, r1.id]);
      });

      it("filters by one status or several", async () => {
        const { r1, r2, r3, r4 } = await seed();
        expect(ids(await store.listRuns({ status: "pending" }))).toEqual([r3.id, r1.id]);
        expect(ids(await store.listRuns({ status: ["canceled", "running"] }))).toEqual([
          r4.id,
          r2.id,
        ]);
        expect(await store.listRuns({ status: "completed" })).toEqual([]);
      });

      it("filters by workflow and parent, combined with status", async () => {
        const { r1, r2, r3, r4 } = await seed();
        expect(ids(await store.listRuns({ workflow: "alpha" }))).toEqual([r3.id, r1.id]);
        expect(ids(await store.listRuns({ workflow: "beta" }))).toEqual([r4.id, r2.id]);
        expect(ids(await store.listRuns({ parentId: r1.id }))).toEqual([r2.id]);
        expect(ids(await store.listRuns({ workflow: "beta", status: "running" }))).toEqual([r4.id]);
        expect(await store.listRuns({ workflow: "gamma" })).toEqual([]);
      });

      it("limits and pages with `before` (createdAt, then id)", async () => {
        const { r1, r2, r3, r4 } = await seed();
        const page1 = await store.listRuns({ limit: 2 });
        expect(ids(page1)).toEqual([r4.id, r3.id]);
        const last = page1[1]!;
        const page2 = await store.listRuns({
          limit: 2,
          before: { createdAt: last.createdAt, id: last.id },
        });
        expect(ids(page2)).toEqual([r2.id, r1.id]);
        const end = page2[1]!;
        expect(
          await store.listRuns({ limit: 2, before: { createdAt: end.createdAt, id: end.id } }),
        ).toEqual([]);
        // Same createdAt: the id decides. A larger id than r3's puts r3 strictly before it.
        expect(
          ids(await store.listRuns({ before: { createdAt: r3.createdAt, id: `${r3.id}~` } })),
        ).toEqual([r3.id, r2.id, r1.id]);
        expect(ids(await store.listRuns({ before: { createdAt: r3.createdAt, id: "" } }))).toEqual([
          r2.id,
          r1.id,
        ]);
      });

      it("returns full records equal to getRun", async () => {
        const { r3 } = await seed();
        const [listed] = await store.listRuns({ limit: 1, status: "pending" });
        expect(listed).toEqual(await store.getRun(r3.id));
      });

      it("filters by version, with or without the workflow", async () => {
        const a1 = (await store.createRun(newRun({ workflow: "alpha", version: "1" }))).run;
        const a2 = (await store.createRun(newRun({ workflow: "alpha", version: "2" }))).run;
        const b2 = (await store.createRun(newRun({ workflow: "beta", version: "2" }))).run;
        expect(ids(await store.listRuns({ version: "2" })).sort()).toEqual([a2.id, b2.id].sort());
        expect(ids(await store.listRuns({ workflow: "alpha", version: "1" }))).toEqual([a1.id]);
        expect(await store.listRuns({ version: "3" })).toEqual([]);
      });

      it("filters by text in the id, taken literally (no wildcards)", async () => {
        const plain = (await store.createRun(newRun({ id: "fix-bug-42" }))).run;
        const pct = (await store.createRun(newRun({ id: "100%_done" }))).run;
        await store.createRun(newRun({ id: "other" }));
        expect(ids(await store.listRuns({ idContains: "bug-4" }))).toEqual([plain.id]);
        expect(ids(await store.listRuns({ idContains: "%_" }))).toEqual([pct.id]);
        expect(await store.listRuns({ idContains: "_d_" })).toEqual([]);
        expect(await store.listRuns({ idContains: "BUG" })).toEqual([]);
        expect(ids(await store.listRuns({ idContains: "" }))).toHaveLength(3);
      });

      it("filters waiting runs that wait for an event", async () => {
        const onEvent = await started();
        const sleeping = await started();
        const far = CONTRACT_T0 + 60 * MINUTE;
        await release(onEvent, {
          status: "waiting",
          readyAt: far,
          wakeAt: far,
          waitingFor: ["go"],
        });
        await release(sleeping, { status: "waiting", readyAt: far, wakeAt: far, waitingFor: [] });
        await store.createRun(newRun());
        expect(ids(await store.listRuns({ waitingForEvent: true }))).toEqual([onEvent.id]);
        expect(await store.listRuns({ waitingForEvent: true, status: "pending" })).toEqual([]);
      });
    });

    // ---- execution ----

    describe("claimRuns", () => {
      it("sets running, the lease, readyAt = leaseUntil and epoch + 1", async () => {
        const { run } = await store.createRun(newRun());
        const c = await claim(run.id, "worker-1");
        expect(c.recovered).toBe(false);
        expect(c.run.status).toBe("running");
        expect(c.run.leaseOwner).toBe("worker-1");
        expect(c.run.epoch).toBe(run.epoch + 1);
        expectNear(c.run.leaseUntil, CONTRACT_T0 + LEASE_MS);
        expect(c.run.readyAt).toBe(c.run.leaseUntil);
        expect(await store.getRun(run.id)).toEqual(c.run);
      });

      it("claims only runs that are ready (readyAt <= now)", async () => {
        const later = await started();
        await release(later, { status: "pending", readyAt: CONTRACT_T0 + 10 * MINUTE });
        const { run: now } = await store.createRun(newRun());
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => c.run.id)).toEqual([now.id]);
        advance(11 * MINUTE);
        const c = await claim(later.id, "worker-2");
        expect(c.run.epoch).toBe(later.epoch + 1);
      });

      it("keeps a run released held for a step body from other workers until the hold ends", async () => {
        const run = await started();
        const heldFor = { workerId: "worker-1", ms: 10 * MINUTE };
        await release(run, { status: "failed", error: { name: "Error", message: "x" }, heldFor });
        // Made ready by hand: still no other worker's, as if worker-1 still held its lease.
        expect((await store.resumeRun(run.id, {})).ok).toBe(true);
        const none = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(none).toEqual([]);
        advance(11 * MINUTE);
        const c = await claim(run.id, "worker-2");
        expect(c.run.leaseOwner).toBe("worker-2");
      });

      it("lets the worker that released a held run claim it, and its claim ends the hold", async () => {
        const run = await started();
        const heldFor = { workerId: "worker-1", ms: 10 * MINUTE };
        await release(run, { status: "paused", pausedFor: "budget", readyAt: null, heldFor });
        expect((await store.resumeRun(run.id, {})).ok).toBe(true);
        const mine = await claim(run.id, "worker-1");
        await release(mine.run, { status: "pending", readyAt: CONTRACT_T0 });
        const c = await claim(run.id, "worker-2");
        expect(c.run.epoch).toBe(mine.run.epoch + 1);
      });

      it("says who holds a held run and until when (heldBy, heldUntil); a claim clears both", async () => {
        const run = await started();
        const heldFor = { workerId: "worker-1", ms: 10 * MINUTE };
        await release(run, { status: "failed", error: { name: "Error", message: "x" }, heldFor });
        const held = await mustGet(run.id);
        expect(held.heldBy).toBe("worker-1");
        expectNear(held.heldUntil, CONTRACT_T0 + 10 * MINUTE);
        expect((await store.resumeRun(run.id, {})).ok).toBe(true);
        const mine = await claim(run.id, "worker-1");
        expect([mine.run.heldBy, mine.run.heldUntil]).toEqual([null, null]);
      });

      it("endHolds ends a hold still the worker's at that epoch now, not another's or an older one's", async () => {
        const failed = { status: "failed", error: { name: "Error", message: "x" } } as const;
        const heldFor = (workerId: string) => ({ workerId, ms: 10 * MINUTE });
        const [mine, theirs, reclaimed] = [await started(), await started(), await started()];
        // Held, made ready, claimed again by its holder and released held again: a newer hold.
        await release(reclaimed, { ...failed, heldFor: heldFor("worker-1") });
        expect((await store.resumeRun(reclaimed.id, {})).ok).toBe(true);
        const again = await claim(reclaimed.id, "worker-1");
        await release(again.run, { ...failed, heldFor: heldFor("worker-1") });
        await release(mine, { ...failed, heldFor: heldFor("worker-1") });
        await release(theirs, { ...failed, heldFor: heldFor("worker-3") });
        for (const r of [mine, theirs, reclaimed]) {
          expect((await store.resumeRun(r.id, {})).ok).toBe(true);
        }
        const out = await store.renewLeases({
          workerId: "worker-1",
          runs: [],
          leaseMs: LEASE_MS,
          endHolds: [mine, theirs, reclaimed].map((r) => ({ runId: r.id, epoch: r.epoch })),
        });
        expect(out).toEqual({ lost: [], cancelRequested: [] });
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => c.run.id)).toEqual([mine.id]);
        expect((await mustGet(theirs.id)).heldBy).toBe("worker-3");
        expect((await mustGet(reclaimed.id)).heldBy).toBe("worker-1");
      });

      it("claims only the listed workflow@version pairs", async () => {
        const { run: a1 } = await store.createRun(newRun({ workflow: "alpha", version: "1" }));
        await store.createRun(newRun({ workflow: "alpha", version: "2" }));
        await store.createRun(newRun({ workflow: "beta", version: "1" }));
        const none = await store.claimRuns({
          workerId: "worker-1",
          workflows: [],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(none).toEqual([]);
        const claimed = await store.claimRuns({
          workerId: "worker-1",
          workflows: ["alpha@1", "gamma@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => c.run.id)).toEqual([a1.id]);
      });

      it("respects the limit", async () => {
        for (let i = 0; i < 5; i++) await store.createRun(newRun());
        const p = { workerId: "worker-1", workflows: ["alpha@1"], leaseMs: LEASE_MS };
        expect(await store.claimRuns({ ...p, limit: 2 })).toHaveLength(2);
        expect(await store.claimRuns({ ...p, limit: 10 })).toHaveLength(3);
        expect(await store.claimRuns({ ...p, limit: 10 })).toHaveLength(0);
      });

      it("does not claim a run whose lease is live", async () => {
        const run = await started();
        advance(LEASE_MS / 2);
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed).toEqual([]);
        expect((await mustGet(run.id)).leaseOwner).toBe("worker-1");
      });

      it("reclaims an expired lease with recovered=true, never by the same worker", async () => {
        const run = await started();
        advance(2 * LEASE_MS);
        const p = { workflows: ["alpha@1"], limit: 10, leaseMs: LEASE_MS };
        expect(await store.claimRuns({ ...p, workerId: "worker-1" })).toEqual([]);
        const [c] = await store.claimRuns({ ...p, workerId: "worker-2" });
        expect(c?.recovered).toBe(true);
        expect(c?.run.id).toBe(run.id);
        expect(c?.run.leaseOwner).toBe("worker-2");
        expect(c?.run.epoch).toBe(run.epoch + 1);
        expectNear(c?.run.leaseUntil, CONTRACT_T0 + 3 * LEASE_MS);
      });

      it("expireLease ends a lease now: the run stays running, and any worker (its last owner too) recovers it", async () => {
        const run = await started();
        const hints: StoreHint[] = [];
        const unsubscribe = store.subscribe((h) => hints.push(h));
        try {
          expect(await store.expireLease({ runId: run.id, epoch: run.epoch })).toEqual({
            ok: true,
          });
          const after = await mustGet(run.id);
          expect(after).toMatchObject({ status: "running", epoch: run.epoch, leaseOwner: null });
          expectNear(after.leaseUntil, CONTRACT_T0);
          await waitFor(
            () => hints.some((h) => h.kind === "runnable" && (h.runId ?? run.id) === run.id),
            "a runnable hint",
          );
        } finally {
          unsubscribe();
        }
        const p = { workflows: ["alpha@1"], limit: 10, leaseMs: LEASE_MS };
        const [c] = await store.claimRuns({ ...p, workerId: "worker-1" });
        expect(c).toMatchObject({ recovered: true, run: { id: run.id, epoch: run.epoch + 1 } });
      });

      it("expireLease is fenced: a stale epoch or a run no longer running writes nothing", async () => {
        const run = await started();
        expect(await store.expireLease({ runId: run.id, epoch: run.epoch - 1 })).toEqual({
          ok: false,
        });
        expect(await mustGet(run.id)).toMatchObject({ leaseOwner: "worker-1", epoch: run.epoch });
        await release(run, { status: "completed", output: '"ok"' });
        expect(await store.expireLease({ runId: run.id, epoch: run.epoch })).toEqual({ ok: false });
        expect(await mustGet(run.id)).toMatchObject({ status: "completed", leaseOwner: null });
        expect(await store.expireLease({ runId: "run_missing", epoch: 1 })).toEqual({ ok: false });
      });

      it("expireLease onlyIfRecovered ends a lease only when its claim took the run from a crashed worker", async () => {
        const fresh = await started();
        expect(
          await store.expireLease({ runId: fresh.id, epoch: fresh.epoch, onlyIfRecovered: true }),
        ).toEqual({ ok: false });
        expect(await mustGet(fresh.id)).toMatchObject({
          status: "running",
          leaseOwner: "worker-1",
        });
        advance(2 * LEASE_MS);
        const p = { workflows: ["alpha@1"], limit: 10, leaseMs: LEASE_MS };
        const [c] = await store.claimRuns({ ...p, workerId: "worker-2" });
        expect(c).toMatchObject({ recovered: true, run: { id: fresh.id } });
        expect(
          await store.expireLease({ runId: fresh.id, epoch: c!.run.epoch, onlyIfRecovered: true }),
        ).toEqual({ ok: true });
        expect(await mustGet(fresh.id)).toMatchObject({ status: "running", leaseOwner: null });
      });

      it("expireLease leaves a run with a cancel asked leased: released, it ends canceled at once", async () => {
        const run = await started();
        await store.requestCancel(run.id, "stop it");
        expect(await store.expireLease({ runId: run.id, epoch: run.epoch })).toEqual({ ok: false });
        expect(await mustGet(run.id)).toMatchObject({
          status: "running",
          leaseOwner: "worker-1",
          cancelRequested: true,
        });
      });

      it("claims a waiting run when its timer is due, never an event-only wait", async () => {
        const timed = await started();
        const eventOnly = await started();
        await release(timed, {
          status: "waiting",
          readyAt: CONTRACT_T0 + 10 * MINUTE,
          wakeAt: CONTRACT_T0 + 10 * MINUTE,
        });
        await release(eventOnly, { status: "waiting", readyAt: null, waitingFor: ["go"] });
        advance(11 * MINUTE);
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => [c.run.id, c.recovered])).toEqual([[timed.id, false]]);
      });

      it("never claims finished runs or runs paused for budget", async () => {
        const done = await started();
        const broke = await started();
        await release(done, { status: "completed", output: '"ok"' });
        // Even with a readyAt set, only a pause for version is claimable.
        await release(broke, {
          status: "paused",
          pausedFor: "budget",
          reason: "budget spent",
          readyAt: CONTRACT_T0,
        });
        await store.createRun(newRun({ id: "run_canceled" }));
        await store.requestCancel("run_canceled", "stop");
        advance(60 * MINUTE);
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed).toEqual([]);
      });

      it("never hands one run to two concurrent claimers", async () => {
        const all = new Set<string>();
        for (let i = 0; i < 20; i++) all.add((await store.createRun(newRun())).run.id);
        const seen: string[] = [];
        for (let round = 0; round < 10 && seen.length < all.size; round++) {
          const batches = await Promise.all(
            [1, 2, 3, 4].map((w) =>
              store.claimRuns({
                workerId: `worker-${w}`,
                workflows: ["alpha@1"],
                limit: 3,
                leaseMs: LEASE_MS,
              }),
            ),
          );
          for (const b of batches) for (const c of b) seen.push(c.run.id);
        }
        expect(seen).toHaveLength(all.size);
        expect(new Set(seen)).toEqual(all);
      });
    });

    describe("renewLeases", () => {
      it("extends the lease of runs held at their epoch", async () => {
        const run = await started();
        advance(LEASE_MS / 2);
        const out = await store.renewLeases({
          workerId: "worker-1",
          runs: [{ runId: run.id, epoch: run.epoch }],
          leaseMs: LEASE_MS,
        });
        expect(out).toEqual({ lost: [], cancelRequested: [] });
        const after = await mustGet(run.id);
        expectNear(after.leaseUntil, CONTRACT_T0 + LEASE_MS / 2 + LEASE_MS);
        expect(after.readyAt).toBe(after.leaseUntil);
        expect(after.epoch).toBe(run.epoch);
        // Past the original lease, the renewed one still keeps other workers out.
        advance(LEASE_MS * 0.75);
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed).toEqual([]);
      });

      it("reports runs whose epoch moved on, or that are no longer running, as lost", async () => {
        const taken = await started();
        const released = await started();
        await release(released, { status: "completed", output: null });
        advance(2 * LEASE_MS);
        await claim(taken.id, "worker-2");
        const out = await store.renewLeases({
          workerId: "worker-1",
          runs: [
            { runId: taken.id, epoch: taken.epoch },
            { runId: released.id, epoch: released.epoch },
            { runId: "run_unknown", epoch: 1 },
          ],
          leaseMs: LEASE_MS,
        });
        expect([...out.lost].sort()).toEqual([taken.id, released.id, "run_unknown"].sort());
        expect(out.cancelRequested).toEqual([]);
        expect((await mustGet(taken.id)).leaseOwner).toBe("worker-2");
      });

      it("extends a hold still the worker's (holds), not another worker's", async () => {
        const mine = await started();
        const theirs = await started();
        const heldFor = (workerId: string) => ({ workerId, ms: LEASE_MS });
        const failed = { status: "failed", error: { name: "Error", message: "x" } } as const;
        await release(mine, { ...failed, heldFor: heldFor("worker-1") });
        await release(theirs, { ...failed, heldFor: heldFor("worker-3") });
        expect((await store.resumeRun(mine.id, {})).ok).toBe(true);
        expect((await store.resumeRun(theirs.id, {})).ok).toBe(true);
        advance(LEASE_MS / 2);
        const out = await store.renewLeases({
          workerId: "worker-1",
          runs: [],
          leaseMs: LEASE_MS,
          holds: [mine.id, theirs.id],
        });
        expect(out).toEqual({ lost: [], cancelRequested: [] });
        // Past the hold's first end: the renewed one still keeps other workers out.
        advance(LEASE_MS * 0.75);
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => c.run.id)).toEqual([theirs.id]);
        advance(LEASE_MS);
        expect((await claim(mine.id, "worker-2")).run.leaseOwner).toBe("worker-2");
      });

      it("reports a pending cancel request", async () => {
        const run = await started();
        await store.requestCancel(run.id, "user asked");
        const out = await store.renewLeases({
          workerId: "worker-1",
          runs: [{ runId: run.id, epoch: run.epoch }],
          leaseMs: LEASE_MS,
        });
        expect(out).toEqual({ lost: [], cancelRequested: [run.id] });
      });
    });

    describe("appendRecords", () => {
      it("writes steps, attempts and intents; loadJournal returns steps by seq", async () => {
        const run = await started();
        const s2 = step(run.id, "c", 2);
        const s0 = step(run.id, "a", 0, { kind: "effect" });
        const s1 = step(run.id, "b", 1, {
          outcome: "error",
          result: null,
          error: { name: "FatalError", code: "FATAL", message: "nope", stack: "at x" },
        });
        const a1 = attempt(run.id, "b", 1);
        const i0 = intent(run.id, "a");
        expect(
          await store.appendRecords([
            { runId: run.id, epoch: run.epoch, steps: [s2], intents: [i0] },
          ]),
        ).toEqual([{ ok: true }]);
        expect(
          await store.appendRecords([
            { runId: run.id, epoch: run.epoch, steps: [s0, s1], attempts: [a1] },
          ]),
        ).toEqual([{ ok: true }]);
        const j = await store.loadJournal(run.id);
        expect(j.steps).toEqual([s0, s1, s2]);
        expect(j.attempts).toEqual([a1]);
        expect(j.intents).toEqual([i0]);
        expect(j.events).toEqual([]);
      });

      it("an empty batch is fine", async () => {
        expect(await store.appendRecords([])).toEqual([]);
      });

      it("an effect's record keeps whether reconcile found it; a fork copies that", async () => {
        const run = await started();
        const found = step(run.id, "found", 0, { kind: "effect", reconciled: true });
        const made = step(run.id, "made", 1, { kind: "effect", reconciled: false });
        const plain = step(run.id, "plain", 2);
        expect(
          await store.appendRecords([
            { runId: run.id, epoch: run.epoch, steps: [found, made, plain] },
          ]),
        ).toEqual([{ ok: true }]);
        const j = await store.loadJournal(run.id);
        expect(j.steps).toEqual([found, made, plain]);
        expect(j.steps.map((x) => x.reconciled)).toEqual([true, false, undefined]);
        const out = await store.forkRun({
          sourceId: run.id,
          run: newRun({ id: "run_fork_reconciled" }),
          copy: [
            { key: "found", generation: 0 },
            { key: "made", generation: 0 },
          ],
        });
        expect(out.created).toBe(true);
        expect((await store.loadJournal("run_fork_reconciled")).steps).toEqual([
          { ...found, runId: "run_fork_reconciled" },
          { ...made, runId: "run_fork_reconciled" },
        ]);
      });

      it("a key holds one record per generation: a later generation lands beside the earlier one", async () => {
        const run = await started();
        const failed = step(run.id, "k", 0, {
          outcome: "error",
          result: null,
          error: { name: "Error", message: "boom" },
          delivery: 0,
        });
        const later = step(run.id, "k", 0, { generation: 1, delivery: 3, issuedAfter: 2 });
        const late = step(run.id, "m", 1, { delivery: null, issuedAfter: null, issuedLate: true });
        expect(
          await store.appendRecords([{ runId: run.id, epoch: run.epoch, steps: [failed, late] }]),
        ).toEqual([{ ok: true }]);
        expect(
          await store.appendRecords([{ runId: run.id, epoch: run.epoch, steps: [later] }]),
        ).toEqual([{ ok: true }]);
        // The same record again is a no-op; another one in a taken generation conflicts.
        expect(
          await store.appendRecords([{ runId: run.id, epoch: run.epoch, steps: [later] }]),
        ).toEqual([{ ok: true }]);
        expect(
          await store.appendRecords([
            { runId: run.id, epoch: run.epoch, steps: [{ ...later, delivery: 4 }] },
          ]),
        ).toEqual([{ ok: false, reason: "conflict", key: "k" }]);
        const j = await store.loadJournal(run.id);
        expect(j.steps).toEqual([failed, later, late]);
      });

      it("is fenced by epoch: a stale (or unknown) writer is lease-lost and writes nothing", async () => {
        const run = await started();
        advance(2 * LEASE_MS);
        const retaken = (await claim(run.id, "worker-2")).run;
        const stale = {
          runId: run.id,
          epoch: run.epoch,
          steps: [step(run.id, "a", 0, { spend: { tokens: 5 } })],
          attempts: [attempt(run.id, "a", 1, { spend: { tokens: 5 } })],
          intents: [intent(run.id, "a")],
        };
        expect(await store.appendRecords([stale])).toEqual([{ ok: false, reason: "lease-lost" }]);
        expect(await store.appendRecords([{ ...stale, epoch: retaken.epoch + 1 }])).toEqual([
          { ok: false, reason: "lease-lost" },
        ]);
        expect(await store.appendRecords([{ runId: "run_unknown", epoch: 1, steps: [] }])).toEqual([
          { ok: false, reason: "lease-lost" },
        ]);
        expect(await store.loadJournal(run.id)).toEqual({
          steps: [],
          attempts: [],
          intents: [],
          events: [],
        });
        expect((await mustGet(run.id)).budgetSpent).toEqual({});
      });

      it("re-writing an identical record is a no-op; spend is not counted twice", async () => {
        const run = await started();
        const w = {
          runId: run.id,
          epoch: run.epoch,
          steps: [step(run.id, "a", 0, { spend: { tokens: 10 } })],
          attempts: [attempt(run.id, "a", 1, { spend: { tokens: 1 } })],
          intents: [intent(run.id, "a")],
        };
        expect(await store.appendRecords([w])).toEqual([{ ok: true }]);
        const before = await store.loadJournal(run.id);
        // A retry after an unknown commit outcome re-sends the very same records.
        expect(await store.appendRecords([structuredClone(w)])).toEqual([{ ok: true }]);
        expect(await store.loadJournal(run.id)).toEqual(before);
        expect((await mustGet(run.id)).budgetSpent).toEqual({ tokens: 11 });
      });

      it("a different record under an existing key is a conflict and rolls back its write", async () => {
        const run = await started();
        const a = step(run.id, "a", 0, { spend: { tokens: 10 } });
        await store.appendRecords([{ runId: run.id, epoch: run.epoch, steps: [a] }]);
        const journal = await store.loadJournal(run.id);

        const cases: Array<{ label: string; write: Parameters<Store["appendRecords"]>[0][0] }> = [
          {
            label: "step",
            write: {
              runId: run.id,
              epoch: run.epoch,
              steps: [step(run.id, "b", 1, { spend: { tokens: 7 } }), { ...a, result: '"other"' }],
            },
          },
          {
            label: "attempt",
            write: {
              runId: run.id,
              epoch: run.epoch,
              steps: [step(run.id, "b", 1, { spend: { tokens: 7 } })],
              attempts: [attempt(run.id, "x", 1), attempt(run.id, "x", 1, { retryAt: null })],
            },
          },
          {
            label: "intent",
            write: {
              runId: run.id,
              epoch: run.epoch,
              intents: [intent(run.id, "i"), intent(run.id, "i", { data: '"changed"' })],
              steps: [step(run.id, "b", 1, { spend: { tokens: 7 } })],
            },
          },
        ];
        for (const c of cases) {
          const [out] = await store.appendRecords([c.write]);
          expect(out, c.label).toMatchObject({ ok: false, reason: "conflict" });
          expect(await store.loadJournal(run.id), c.label).toEqual(journal);
          expect((await mustGet(run.id)).budgetSpent, c.label).toEqual({ tokens: 10 });
        }
        const [stepConflict] = await store.appendRecords([cases[0]!.write]);
        expect(stepConflict).toEqual({ ok: false, reason: "conflict", key: "a" });
      });

      it("adds step and attempt spend to budgetSpent, for any amount names", async () => {
        const run = await started();
        await store.appendRecords([
          {
            runId: run.id,
            epoch: run.epoch,
            steps: [step(run.id, "a", 0, { spend: { tokens: 100, usd: 0.5 } })],
            attempts: [attempt(run.id, "a", 1, { spend: { tokens: 20, "gpu-seconds": 3 } })],
          },
        ]);
        await store.appendRecords([
          {
            runId: run.id,
            epoch: run.epoch,
            steps: [step(run.id, "b", 1, { spend: { usd: 0.25, "émoji 💸": 1 } })],
          },
        ]);
        expect((await mustGet(run.id)).budgetSpent).toEqual({
          tokens: 120,
          usd: 0.75,
          "gpu-seconds": 3,
          "émoji 💸": 1,
        });
      });

      it("consume marks events; consuming one twice is a conflict", async () => {
        const run = await started();
        const other = await started();
        const e1 = await store.sendEvent({ runId: run.id, name: "approve", payload: "1" });
        const e2 = await store.sendEvent({ runId: run.id, name: "approve", payload: "2" });
        const eo = await store.sendEvent({ runId: other.id, name: "approve", payload: "o" });
        if (!e1.ok || !e2.ok || !eo.ok) throw new Error("sendEvent refused");
        const wait = step(run.id, "wait:0", 0, { kind: "wait", result: "1" });
        const w = {
          runId: run.id,
          epoch: run.epoch,
          steps: [wait],
          consume: [{ eventSeq: e1.event.seq, key: "wait:0" }],
        };
        expect(await store.appendRecords([w])).toEqual([{ ok: true }]);
        expect((await store.loadJournal(run.id)).events).toEqual([e2.event]);
        // The same write again (a retry) is a no-op.
        expect(await store.appendRecords([w])).toEqual([{ ok: true }]);

        const again = (eventSeq: number, key: string) => ({
          runId: run.id,
          epoch: run.epoch,
          steps: [step(run.id, key, 1, { kind: "wait" })],
          consume: [{ eventSeq, key }],
        });
        // Consumed by another wait, another run's event, an event that does not exist.
        for (const seq of [e1.event.seq, eo.event.seq, e2.event.seq + 1_000_000]) {
          expect(await store.appendRecords([again(seq, "wait:1")])).toEqual([
            { ok: false, reason: "conflict", key: "wait:1" },
          ]);
        }
        const j = await store.loadJournal(run.id);
        expect(j.steps).toEqual([wait]);
        expect(j.events).toEqual([e2.event]);
        expect((await store.loadJournal(other.id)).events).toEqual([eo.event]);
      });

      it("commits the good writes of a mixed batch", async () => {
        const lost = await started();
        const good = await started();
        const conflicted = await started();
        await store.appendRecords([
          { runId: conflicted.id, epoch: conflicted.epoch, steps: [step(conflicted.id, "a", 0)] },
        ]);
        const out = await store.appendRecords([
          { runId: lost.id, epoch: lost.epoch - 1, steps: [step(lost.id, "a", 0)] },
          {
            runId: good.id,
            epoch: good.epoch,
            steps: [step(good.id, "a", 0, { spend: { tokens: 3 } })],
            intents: [intent(good.id, "b")],
          },
          {
            runId: conflicted.id,
            epoch: conflicted.epoch,
            steps: [step(conflicted.id, "b", 1), step(conflicted.id, "a", 0, { name: "x" })],
          },
        ]);
        expect(out).toEqual([
          { ok: false, reason: "lease-lost" },
          { ok: true },
          { ok: false, reason: "conflict", key: "a" },
        ]);
        expect((await store.loadJournal(lost.id)).steps).toEqual([]);
        const gj = await store.loadJournal(good.id);
        expect(gj.steps).toEqual([step(good.id, "a", 0, { spend: { tokens: 3 } })]);
        expect(gj.intents).toEqual([intent(good.id, "b")]);
        expect((await mustGet(good.id)).budgetSpent).toEqual({ tokens: 3 });
        expect((await store.loadJournal(conflicted.id)).steps).toEqual([
          step(conflicted.id, "a", 0),
        ]);
      });
      it("a write no backend can store fails alone as unstorable; the rest of its batch lands", async () => {
        const cut = "👍 great".slice(1); // a lone surrogate, as a reply cut mid-emoji has
        const good = await started();
        const badResult = await started();
        const badName = await started();
        const badSpend = await started();
        const out = await store.appendRecords([
          {
            runId: badResult.id,
            epoch: badResult.epoch,
            steps: [step(badResult.id, "r", 0, { result: cut })],
          },
          {
            runId: good.id,
            epoch: good.epoch,
            steps: [step(good.id, "a", 0, { spend: { tokens: 2 } })],
          },
          {
            runId: badName.id,
            epoch: badName.epoch,
            intents: [intent(badName.id, "i")],
            steps: [step(badName.id, "n", 0, { name: "nul\u0000name" })],
          },
          {
            runId: badSpend.id,
            epoch: badSpend.epoch,
            attempts: [attempt(badSpend.id, "s", 1, { spend: { "usd\u0000": 1 } })],
          },
        ]);
        expect(out).toEqual([
          {
            ok: false,
            reason: "unstorable",
            key: "r",
            message: expect.stringMatching(/result .*lone surrogate/),
          },
          { ok: true },
          {
            ok: false,
            reason: "unstorable",
            key: "n",
            message: expect.stringMatching(/name .*NUL/),
          },
          {
            ok: false,
            reason: "unstorable",
            key: "s",
            message: expect.stringMatching(/spend name .*NUL/),
          },
        ]);
        for (const o of out) if (!o.ok && "message" in o) expect(o.message).not.toContain(cut);
        expect((await store.loadJournal(good.id)).steps).toEqual([
          step(good.id, "a", 0, { spend: { tokens: 2 } }),
        ]);
        expect((await mustGet(good.id)).budgetSpent).toEqual({ tokens: 2 });
        for (const bad of [badResult, badName, badSpend]) {
          const j = await store.loadJournal(bad.id);
          expect([...j.steps, ...j.attempts, ...j.intents], bad.id).toEqual([]);
          expect((await mustGet(bad.id)).budgetSpent).toEqual({});
        }
      });

      it("stores error records with NUL and lone surrogates exactly", async () => {
        const cut = "👍 great".slice(1);
        const run = await started();
        const error = {
          name: `Fatal\u0000${cut}`,
          code: "FATAL",
          message: `a\u0000b ${cut}`,
          stack: `at \u0000 ${cut}`,
        };
        const s = step(run.id, "s", 0, { outcome: "error", result: null, error });
        const a = attempt(run.id, "s", 1, { error, retryAt: null });
        expect(
          await store.appendRecords([
            { runId: run.id, epoch: run.epoch, steps: [s], attempts: [a] },
          ]),
        ).toEqual([{ ok: true }]);
        // Writing the very same records again is still a no-op, not a conflict.
        expect(
          await store.appendRecords([
            { runId: run.id, epoch: run.epoch, steps: [s], attempts: [a] },
          ]),
        ).toEqual([{ ok: true }]);
        const j = await store.loadJournal(run.id);
        expect(j.steps[0]?.error).toEqual(error);
        expect(j.attempts[0]?.error).toEqual(error);
        const after = await release(run, {
          status: "failed",
          error,
          reason: `${error.name}: ${error.message}`,
        });
        expect(after.error).toEqual(error);
        expect((await mustGet(run.id)).error).toEqual(error);
      });

      it("makes reasons, cancel reasons and hosts storable: NUL and lone surrogates become visible escapes", async () => {
        const cut = "👍 great".slice(1);
        const failed = await started();
        const after = await release(failed, {
          status: "failed",
          error: { name: "Error", message: "m" },
          reason: `Error: a\u0000b ${cut}`,
        });
        expect(after.reason).toBe("Error: a\\u0000b \\udc4d great");
        const { run: pending } = await store.createRun(newRun());
        const out = await store.requestCancel(pending.id, `stop\u0000 ${cut}`);
        expect(out.state).toBe("canceled");
        expect((await mustGet(pending.id)).reason).toBe("stop\\u0000 \\udc4d great");
        await store.registerWorker({ id: "w-x", host: `host\u0000${cut}`, pid: 1, workflows: [] });
        expect((await store.listWorkers())[0]?.host).toBe("host\\u0000\\udc4d great");
      });
    });

    describe("releaseRun", () => {
      it("completed: stores the output, clears the lease and readiness", async () => {
        const run = await started();
        advance(MINUTE);
        const after = await release(run, { status: "completed", output: '{"done":true}' });
        expect(after).toMatchObject({
          status: "completed",
          output: '{"done":true}',
          leaseOwner: null,
          leaseUntil: null,
          readyAt: null,
          epoch: run.epoch,
        });
        expectNear(after.updatedAt, CONTRACT_T0 + MINUTE);
        // A release answers the run but its input (ReleasedRun), which a store may leave out.
        expect(butInput(await store.getRun(run.id))).toEqual(butInput(after));
      });

      it("failed: stores the error and reason", async () => {
        const run = await started();
        const error = { name: "TypeError", message: "bad", stack: "at y", code: undefined };
        const after = await release(run, { status: "failed", error, reason: "step x failed" });
        expect(after).toMatchObject({ status: "failed", reason: "step x failed", readyAt: null });
        expect(after.error).toEqual(error);
      });

      it("paused: stores pausedFor and reason, not claimable", async () => {
        const run = await started();
        const after = await release(run, {
          status: "paused",
          pausedFor: "budget",
          reason: "tokens over 1000",
          readyAt: null,
        });
        expect(after).toMatchObject({
          status: "paused",
          pausedFor: "budget",
          reason: "tokens over 1000",
          readyAt: null,
          leaseOwner: null,
        });
      });

      it("pending: ready at the given time", async () => {
        const run = await started();
        const at = CONTRACT_T0 + 5 * MINUTE;
        const after = await release(run, { status: "pending", readyAt: at });
        expect(after).toMatchObject({ status: "pending", readyAt: at, leaseOwner: null });
        expect(after.leaseUntil).toBeNull();
      });

      it("waiting: stores the timer and the awaited event names", async () => {
        const run = await started();
        const at = CONTRACT_T0 + 30 * MINUTE;
        const after = await release(run, {
          status: "waiting",
          readyAt: at,
          wakeAt: at,
          waitingFor: ["approve", "reject"],
        });
        expect(after).toMatchObject({
          status: "waiting",
          readyAt: at,
          wakeAt: at,
          waitingFor: ["approve", "reject"],
          leaseOwner: null,
          leaseUntil: null,
        });
      });

      it("is fenced by epoch: a stale release changes nothing", async () => {
        const run = await started();
        advance(2 * LEASE_MS);
        await claim(run.id, "worker-2");
        const before = await mustGet(run.id);
        const out = await store.releaseRun({
          runId: run.id,
          epoch: run.epoch,
          status: "completed",
          output: '"zombie"',
          readyAt: null,
          events: [{ runId: run.id, name: "zombie", payload: "1" }],
        });
        expect(out).toEqual({ ok: false, reason: "lease-lost" });
        expect(await store.getRun(run.id)).toEqual(before);
        expect((await store.loadJournal(run.id)).events).toEqual([]);
        expect(
          await store.releaseRun({
            runId: "run_unknown",
            epoch: 1,
            status: "completed",
            readyAt: null,
          }),
        ).toEqual({ ok: false, reason: "lease-lost" });
      });

      it("waiting with an unconsumed awaited event already there: ready now", async () => {
        const run = await started();
        await store.sendEvent({ runId: run.id, name: "approve", payload: "yes" });
        advance(MINUTE);
        const after = await release(run, {
          status: "waiting",
          readyAt: null,
          waitingFor: ["approve"],
        });
        expect(after.status).toBe("waiting");
        expectNear(after.readyAt, CONTRACT_T0 + MINUTE);
        expect((await claim(run.id, "worker-2")).run.epoch).toBe(run.epoch + 1);
      });

      it("waiting with only events of other names stays unready", async () => {
        const run = await started();
        await store.sendEvent({ runId: run.id, name: "approve", payload: "yes" });
        const after = await release(run, { status: "waiting", readyAt: null, waitingFor: ["x"] });
        expect(after.readyAt).toBeNull();
      });

      it("a cancel request turns a release to pending/waiting/paused into canceled", async () => {
        for (const status of ["pending", "waiting", "paused"] as const) {
          const run = await started();
          await store.requestCancel(run.id, `stop ${status}`);
          const after = await release(run, {
            status,
            readyAt: status === "paused" ? null : CONTRACT_T0,
            ...(status === "paused" ? { pausedFor: "budget" as const } : {}),
            ...(status === "waiting" ? { waitingFor: ["go"] } : {}),
          });
          expect(after.status, status).toBe("canceled");
          expect(after.reason, status).toBe(`stop ${status}`);
          expect(after.readyAt, status).toBeNull();
          expect(after.leaseOwner, status).toBeNull();
        }
      });

      it("a cancel request turns a release with a timer too far off to store into canceled", async () => {
        // The wait's fields are dropped unread: 1e19 ms does not fit PostgreSQL's bigint.
        const run = await started();
        await store.requestCancel(run.id, "stop");
        const after = await release(run, { status: "waiting", readyAt: 1e19, wakeAt: 1e19 });
        expect([after.status, after.readyAt, after.wakeAt]).toEqual(["canceled", null, null]);
      });

      it("a release at a fractional or unknown epoch is lease-lost", async () => {
        const run = await started();
        for (const epoch of [run.epoch + 0.5, run.epoch + 1]) {
          expect(
            await store.releaseRun({ runId: run.id, epoch, status: "completed", readyAt: null }),
          ).toEqual({ ok: false, reason: "lease-lost" });
        }
        expect((await mustGet(run.id)).status).toBe("running");
      });

      it("a cancel request does not undo a completion", async () => {
        const run = await started();
        await store.requestCancel(run.id, "too late");
        const after = await release(run, { status: "completed", output: '"fine"' });
        expect(after).toMatchObject({ status: "completed", output: '"fine"' });
      });

      it("inserts its events in the same transaction and wakes their waiting runs", async () => {
        const parent = await started();
        await release(parent, { status: "waiting", readyAt: null, waitingFor: ["child:done"] });
        const child = await started({ parentId: parent.id });
        advance(MINUTE);
        await release(child, {
          status: "completed",
          output: '"42"',
          events: [{ runId: parent.id, name: "child:done", payload: '"42"' }],
        });
        const events = (await store.loadJournal(parent.id)).events;
        expect(events.map((e) => [e.runId, e.name, e.payload, e.consumedBy])).toEqual([
          [parent.id, "child:done", '"42"', null],
        ]);
        expectNear((await mustGet(parent.id)).readyAt, CONTRACT_T0 + MINUTE);
      });

      it("withdraws a child's end kept for a failed parent when the child is resumed (sentEnd)", async () => {
        const left: number[] = [];
        for (const parentFails of [true, false]) {
          const parent = await started();
          // A workflow of its own each time: the first child, resumed, is claimable.
          const workflow = parentFails ? "beta" : "gamma";
          const child = await started({ parentId: parent.id, workflow });
          const end = { runId: parent.id, name: "child:end", payload: '"x"' };
          if (parentFails) await release(parent, { status: "failed", readyAt: null });
          else await release(parent, { status: "waiting", readyAt: null, waitingFor: ["other"] });
          await release(child, { status: "failed", events: [end] });
          expect((await store.resumeRun(child.id, { sentEnd: "child:end" })).ok).toBe(true);
          left.push((await store.loadJournal(parent.id)).events.length);
        }
        // Withdrawn for the failed parent; a live parent keeps it (an execution of it may
        // be reading it).
        expect(left).toEqual([0, 1]);
      });

      it("keeps a child's end for a failed parent (a resume reads it), not for a completed one", async () => {
        const ends: Array<[string, number]> = [];
        for (const status of ["failed", "completed"] as const) {
          const parent = await started();
          await release(parent, { status, readyAt: null });
          const child = await started({ parentId: parent.id });
          await release(child, {
            status: "completed",
            output: '"42"',
            events: [{ runId: parent.id, name: "child:done", payload: '"42"' }],
          });
          ends.push([status, (await store.loadJournal(parent.id)).events.length]);
          expect((await mustGet(parent.id)).status).toBe(status);
        }
        expect(ends).toEqual([
          ["failed", 1],
          ["completed", 0],
        ]);
      });
    });

    describe("loadJournal", () => {
      it("is empty for a run without records", async () => {
        const { run } = await store.createRun(newRun());
        expect(await store.loadJournal(run.id)).toEqual({
          steps: [],
          attempts: [],
          intents: [],
          events: [],
        });
      });

      it("returns every attempt and intent, and only unconsumed events oldest first", async () => {
        const run = await started();
        const sent = [];
        for (const n of ["a", "b", "c", "d"]) {
          const out = await store.sendEvent({ runId: run.id, name: n, payload: `"${n}"` });
          if (!out.ok) throw new Error("refused");
          sent.push(out.event);
        }
        const attempts = [
          attempt(run.id, "k", 1),
          attempt(run.id, "k", 2),
          attempt(run.id, "j", 1),
        ];
        const intents = [intent(run.id, "k"), intent(run.id, "j")];
        await store.appendRecords([
          {
            runId: run.id,
            epoch: run.epoch,
            attempts,
            intents,
            steps: [step(run.id, "w", 0, { kind: "wait" })],
            consume: [{ eventSeq: sent[1]!.seq, key: "w" }],
          },
        ]);
        const j: Journal = await store.loadJournal(run.id);
        expect(sortAttempts(j.attempts)).toEqual(sortAttempts(attempts));
        expect(byKey(j.intents)).toEqual(byKey(intents));
        expect(j.events).toEqual([sent[0], sent[2], sent[3]]);
      });
    });

    describe("pendingEvents", () => {
      it("returns the unconsumed events, oldest first, and nothing else", async () => {
        const run = await started();
        const sent = [];
        for (const n of ["a", "b", "c"]) {
          const out = await store.sendEvent({ runId: run.id, name: n, payload: `"${n}"` });
          if (!out.ok) throw new Error("refused");
          sent.push(out.event);
        }
        await store.appendRecords([
          {
            runId: run.id,
            epoch: run.epoch,
            steps: [step(run.id, "w", 0, { kind: "wait" })],
            consume: [{ eventSeq: sent[1]!.seq, key: "w" }],
          },
        ]);
        expect(await store.pendingEvents(run.id)).toEqual([sent[0], sent[2]]);
        // The last look after a deadline (waits for an event write under way) reads the same.
        expect(await store.pendingEvents(run.id, { settled: true })).toEqual([sent[0], sent[2]]);
        expect(await store.pendingEvents("run_unknown")).toEqual([]);
      });

      it("without payloads (pendingEventHeads, loadJournal's eventHeads), read by seq when waited for (eventPayloads)", async () => {
        if (!store.pendingEventHeads || !store.eventPayloads) return;
        const run = await started();
        const sent = [];
        for (const n of ["a", "b", "c"]) {
          const out = await store.sendEvent({ runId: run.id, name: n, payload: `"${n}"` });
          if (!out.ok) throw new Error("refused");
          sent.push(out.event);
        }
        await store.appendRecords([
          {
            runId: run.id,
            epoch: run.epoch,
            steps: [step(run.id, "w", 0, { kind: "wait" })],
            consume: [{ eventSeq: sent[1]!.seq, key: "w" }],
          },
        ]);
        const heads = [sent[0]!, sent[2]!].map(({ payload: _, ...head }) => head);
        expect(await store.pendingEventHeads(run.id)).toEqual(heads);
        expect(await store.pendingEventHeads(run.id, { settled: true })).toEqual(heads);
        expect(await store.pendingEventHeads("run_unknown")).toEqual([]);
        const j = await store.loadJournal(run.id, { eventPayloads: false });
        expect({ events: j.events, eventHeads: j.eventHeads }).toEqual({
          events: [],
          eventHeads: heads,
        });
        // Consumed or not; a seq the run has no event under is left out.
        const payloads = await store.eventPayloads(run.id, [sent[2]!.seq, sent[1]!.seq, 999_999]);
        expect(payloads.sort((x, y) => x.seq - y.seq)).toEqual([
          { seq: sent[1]!.seq, payload: '"b"' },
          { seq: sent[2]!.seq, payload: '"c"' },
        ]);
        expect(await store.eventPayloads("run_unknown", [sent[0]!.seq])).toEqual([]);
      });

      it("heads of one name, a page at a time past a seq (pendingEventHeadsNamed), and loadJournal without them", async () => {
        if (!store.pendingEventHeadsNamed) return;
        const run = await started();
        const other = await started();
        const sent: EventRecord[] = [];
        for (const n of ["x", "y", "x", "x", "y", "x"]) {
          const out = await store.sendEvent({ runId: run.id, name: n, payload: `"${n}"` });
          if (!out.ok) throw new Error("refused");
          sent.push(out.event);
        }
        await store.sendEvent({ runId: other.id, name: "x", payload: '"o"' });
        await store.appendRecords([
          {
            runId: run.id,
            epoch: run.epoch,
            steps: [step(run.id, "w", 0, { kind: "wait" })],
            consume: [{ eventSeq: sent[2]!.seq, key: "w" }],
          },
        ]);
        const head = (i: number) => {
          const { payload: _, ...h } = sent[i]!;
          return h;
        };
        const named = (name: string, after: number, limit: number, settled = false) =>
          store.pendingEventHeadsNamed!(run.id, { name, after, limit }, { settled });
        // Unconsumed, of that name, oldest first: consumed #2 and the other run's left out.
        expect(await named("x", 0, 10)).toEqual([head(0), head(3), head(5)]);
        expect(await named("x", 0, 2)).toEqual([head(0), head(3)]);
        expect(await named("x", sent[3]!.seq, 2)).toEqual([head(5)]);
        expect(await named("x", sent[5]!.seq, 2)).toEqual([]);
        expect(await named("y", 0, 10, true)).toEqual([head(1), head(4)]);
        expect(await named("z", 0, 10)).toEqual([]);
        expect(
          await store.pendingEventHeadsNamed("run_unknown", { name: "x", after: 0, limit: 5 }),
        ).toEqual([]);
        await expect(named("x", -1, 5)).rejects.toThrow(/"after" must be a whole number/);
        await expect(named("x", 0, 0)).rejects.toThrow(/"limit" must be a whole number >= 1/);
        const j = await store.loadJournal(run.id, { eventPayloads: false, pendingEvents: false });
        expect(j.steps.map((s) => s.key)).toEqual(["w"]);
        // A store may ignore pendingEvents; these backends read none.
        expect({ events: j.events, eventHeads: j.eventHeads }).toEqual({ events: [] });
      });

      it("the pages of several names in one read (pendingEventHeadsOfNames), each as pendingEventHeadsNamed reads it", async () => {
        if (!store.pendingEventHeadsNamed || !store.pendingEventHeadsOfNames) return;
        const run = await started();
        const sent: EventRecord[] = [];
        for (const n of ["x", "y", "x", "z", "x", "y"]) {
          const out = await store.sendEvent({ runId: run.id, name: n, payload: `"${n}"` });
          if (!out.ok) throw new Error("refused");
          sent.push(out.event);
        }
        const pages = [
          { name: "x", after: sent[0]!.seq, limit: 1 },
          { name: "none", after: 0, limit: 5 },
          { name: "y", after: 0, limit: 5 },
        ];
        const apart = [];
        for (const page of pages) apart.push(...(await store.pendingEventHeadsNamed(run.id, page)));
        const head = (i: number) => {
          const { payload: _, ...h } = sent[i]!;
          return h;
        };
        expect(apart).toEqual([head(2), head(1), head(5)]);
        expect(await store.pendingEventHeadsOfNames(run.id, pages)).toEqual(apart);
        expect(await store.pendingEventHeadsOfNames(run.id, pages, { settled: true })).toEqual(
          apart,
        );
        expect(await store.pendingEventHeadsOfNames("run_unknown", pages)).toEqual([]);
        await expect(
          store.pendingEventHeadsOfNames(run.id, [{ name: "x", after: 0, limit: 0 }]),
        ).rejects.toThrow(/"limit" must be a whole number >= 1/);
      });
    });

    // ---- events ----

    describe("sendEvent", () => {
      it("stores the event with an increasing seq", async () => {
        const { run } = await store.createRun(newRun());
        advance(MINUTE);
        const a = await store.sendEvent({ runId: run.id, name: "n", payload: '{"a":1}' });
        const b = await store.sendEvent({ runId: run.id, name: "n", payload: '{"b":2}' });
        if (!a.ok || !b.ok) throw new Error("refused");
        expect(a.event).toMatchObject({
          runId: run.id,
          name: "n",
          payload: '{"a":1}',
          consumedBy: null,
        });
        expectNear(a.event.createdAt, CONTRACT_T0 + MINUTE);
        expect(b.event.seq).toBeGreaterThan(a.event.seq);
        expect((await store.loadJournal(run.id)).events).toEqual([a.event, b.event]);
      });

      it("refuses unknown and finished runs", async () => {
        expect(await store.sendEvent({ runId: "run_nope", name: "n", payload: "1" })).toEqual({
          ok: false,
          reason: "not-found",
        });
        const done = await started();
        await release(done, { status: "completed", output: null });
        expect(await store.sendEvent({ runId: done.id, name: "n", payload: "1" })).toEqual({
          ok: false,
          reason: "finished",
          status: "completed",
        });
        const { run: canceled } = await store.createRun(newRun());
        await store.requestCancel(canceled.id, "stop");
        expect(await store.sendEvent({ runId: canceled.id, name: "n", payload: "1" })).toEqual({
          ok: false,
          reason: "finished",
          status: "canceled",
        });
        expect((await store.loadJournal(done.id)).events).toEqual([]);
      });

      it("makes a waiting run ready now", async () => {
        const eventOnly = await started();
        const timed = await started();
        await release(eventOnly, { status: "waiting", readyAt: null, waitingFor: ["go"] });
        const far = CONTRACT_T0 + 24 * 60 * MINUTE;
        await release(timed, { status: "waiting", readyAt: far, wakeAt: far, waitingFor: ["go"] });
        advance(MINUTE);
        await store.sendEvent({ runId: eventOnly.id, name: "go", payload: "1" });
        await store.sendEvent({ runId: timed.id, name: "go", payload: "1" });
        expectNear((await mustGet(eventOnly.id)).readyAt, CONTRACT_T0 + MINUTE);
        expectNear((await mustGet(timed.id)).readyAt, CONTRACT_T0 + MINUTE);
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => c.run.id).sort()).toEqual([eventOnly.id, timed.id].sort());
      });

      it("leaves a run waiting for other event names as it was", async () => {
        const run = await started();
        await release(run, { status: "waiting", readyAt: null, waitingFor: ["approve"] });
        const before = await mustGet(run.id);
        advance(MINUTE);
        const out = await store.sendEvent({ runId: run.id, name: "unrelated", payload: "1" });
        expect(out.ok).toBe(true);
        expect(await store.getRun(run.id)).toEqual(before);
      });

      it("stores one event per idempotency key and answers a repeat with it", async () => {
        const run = await started();
        await release(run, { status: "waiting", readyAt: null, waitingFor: ["go"] });
        const first = await store.sendEvent({
          runId: run.id,
          name: "go",
          payload: '{"ok":true}',
          idempotencyKey: "delivery-1",
        });
        if (!first.ok) throw new Error("refused");
        expect(first.duplicate).toBe(false);
        expect(first.event.idempotencyKey).toBe("delivery-1");
        advance(MINUTE);
        const again = await store.sendEvent({
          runId: run.id,
          name: "go",
          payload: '{"ok":true}',
          idempotencyKey: "delivery-1",
        });
        expect(again).toEqual({ ok: true, event: first.event, duplicate: true });
        const other = await store.sendEvent({
          runId: run.id,
          name: "go",
          payload: '{"ok":false}',
          idempotencyKey: "delivery-1",
        });
        expect(other).toEqual({ ok: false, reason: "key-conflict", event: first.event });
        // Keys are per run; events without a key are never deduplicated.
        const { run: second } = await store.createRun(newRun());
        const elsewhere = await store.sendEvent({
          runId: second.id,
          name: "go",
          payload: '{"ok":true}',
          idempotencyKey: "delivery-1",
        });
        expect(elsewhere.ok && !elsewhere.duplicate).toBe(true);
        await store.sendEvent({ runId: run.id, name: "go", payload: "1" });
        await store.sendEvent({ runId: run.id, name: "go", payload: "1" });
        expect((await store.listEvents(run.id)).map((e) => e.idempotencyKey)).toEqual([
          "delivery-1",
          null,
          null,
        ]);
      });

      it("answers a repeat with the stored event even after the run finished", async () => {
        const run = await started();
        const sent = await store.sendEvent({
          runId: run.id,
          name: "n",
          payload: "1",
          idempotencyKey: "k",
        });
        if (!sent.ok) throw new Error("refused");
        await release(run, { status: "completed", output: null });
        expect(
          await store.sendEvent({ runId: run.id, name: "n", payload: "1", idempotencyKey: "k" }),
        ).toEqual({ ok: true, event: sent.event, duplicate: true });
        expect(
          await store.sendEvent({ runId: run.id, name: "n", payload: "1", idempotencyKey: "k2" }),
        ).toEqual({ ok: false, reason: "finished", status: "completed" });
      });

      it("accepts events for pending and running runs without changing their state", async () => {
        const running = await started();
        const { run: pending } = await store.createRun(newRun());
        expect((await store.sendEvent({ runId: running.id, name: "n", payload: "1" })).ok).toBe(
          true,
        );
        expect((await store.sendEvent({ runId: pending.id, name: "n", payload: "1" })).ok).toBe(
          true,
        );
        expect(await mustGet(running.id)).toMatchObject({
          status: "running",
          epoch: running.epoch,
          leaseOwner: "worker-1",
        });
        expect((await mustGet(pending.id)).status).toBe("pending");
      });
    });

    describe("listEvents", () => {
      it("lists every event of a run, consumed or not, in the order sent", async () => {
        const run = await started();
        const a = await store.sendEvent({ runId: run.id, name: "a", payload: "1" });
        const b = await store.sendEvent({ runId: run.id, name: "b", payload: "2" });
        const { run: other } = await store.createRun(newRun());
        await store.sendEvent({ runId: other.id, name: "x", payload: "3" });
        if (!a.ok || !b.ok) throw new Error("refused");
        expect(
          await store.appendRecords([
            {
              runId: run.id,
              epoch: run.epoch,
              steps: [step(run.id, "wait-a", 0, { kind: "wait" })],
              consume: [{ eventSeq: a.event.seq, key: "wait-a" }],
            },
          ]),
        ).toEqual([{ ok: true }]);
        const listed = await store.listEvents(run.id);
        expect(listed).toEqual([{ ...a.event, consumedBy: "wait-a" }, b.event]);
        expect((await store.loadJournal(run.id)).events).toEqual([b.event]);
        expect(await store.listEvents("run_nope")).toEqual([]);
      });
    });

    // ---- control ----

    describe("requestCancel", () => {
      it("cancels pending, waiting and paused runs at once", async () => {
        const waiting = await started();
        await release(waiting, { status: "waiting", readyAt: null, waitingFor: ["go"] });
        const paused = await started();
        await release(paused, { status: "paused", pausedFor: "budget", readyAt: null });
        const { run: pending } = await store.createRun(newRun());
        for (const id of [pending.id, waiting.id, paused.id]) {
          const out = await store.requestCancel(id, "no longer needed");
          expect(out.state, id).toBe("canceled");
          if (out.state !== "canceled") continue;
          expect(out.run).toMatchObject({
            status: "canceled",
            reason: "no longer needed",
            readyAt: null,
          });
          expect(await store.getRun(id)).toEqual(out.run);
        }
        advance(60 * MINUTE);
        expect(
          await store.claimRuns({
            workerId: "worker-2",
            workflows: ["alpha@1"],
            limit: 10,
            leaseMs: LEASE_MS,
          }),
        ).toEqual([]);
      });

      it("asks the owner of a running run to stop", async () => {
        const run = await started();
        const out = await store.requestCancel(run.id, "stop please");
        expect(out.state).toBe("requested");
        if (out.state !== "requested") return;
        expect(out.run).toMatchObject({
          status: "running",
          cancelRequested: true,
          epoch: run.epoch,
          leaseOwner: "worker-1",
        });
        expect((await mustGet(run.id)).cancelRequested).toBe(true);
      });

      it("a child canceled at once hands parentEvent to its parent in the same transaction and wakes it", async () => {
        const parentEvent = (id: string) => ({
          name: `child:${id}`,
          payload: `{"canceled":"${id}"}`,
        });
        const parent = await started();
        const waitsFor = ["child:k-waiting", "child:k-paused", "child:k-pending"];
        await release(parent, { status: "waiting", readyAt: null, waitingFor: waitsFor });
        // Children of another workflow, so that claiming them never claims the parent.
        const kid = { workflow: "kid", parentId: parent.id };
        const waiting = await started({ ...kid, id: "k-waiting" });
        await release(waiting, { status: "waiting", readyAt: null, waitingFor: ["go"] });
        const paused = await started({ ...kid, id: "k-paused" });
        await release(paused, { status: "paused", pausedFor: "budget", readyAt: null });
        await store.createRun(newRun({ ...kid, id: "k-pending" }));
        const hints: StoreHint[] = [];
        const unsubscribe = store.subscribe((h) => hints.push(h));
        advance(MINUTE);
        for (const id of ["k-waiting", "k-paused", "k-pending"]) {
          const out = await store.requestCancel(id, "not needed", { parentEvent: parentEvent(id) });
          expect(out.state, id).toBe("canceled");
        }
        const events = (await store.loadJournal(parent.id)).events;
        expect(events.map((e) => [e.runId, e.name, e.payload])).toEqual(
          ["k-waiting", "k-paused", "k-pending"].map((id) => [
            parent.id,
            parentEvent(id).name,
            parentEvent(id).payload,
          ]),
        );
        // The parent waits for those names: it is ready now, and told so.
        const woken = await mustGet(parent.id);
        expectNear(woken.readyAt, CONTRACT_T0 + MINUTE);
        await waitFor(
          () => hints.some((h) => h.kind === "runnable" && (h.runId ?? parent.id) === parent.id),
          "a runnable hint for the parent",
        );
        unsubscribe();
        // A repeat cancel stores nothing more.
        await store.requestCancel("k-waiting", "again", { parentEvent: parentEvent("k-waiting") });
        expect((await store.loadJournal(parent.id)).events).toHaveLength(3);
      });

      it("parentEvent is not stored for a run without a parent, a running child, or a finished parent", async () => {
        const lone = await store.createRun(newRun());
        await store.requestCancel(lone.run.id, "x", { parentEvent: { name: "n", payload: "1" } });
        // A running child: its owner releases it as canceled and sends its result then.
        const parent = await started();
        await release(parent, { status: "waiting", readyAt: null, waitingFor: ["n"] });
        const running = await started({ workflow: "kid", parentId: parent.id });
        const out = await store.requestCancel(running.id, "x", {
          parentEvent: { name: "n", payload: "1" },
        });
        expect(out.state).toBe("requested");
        expect((await store.loadJournal(parent.id)).events).toEqual([]);
        // A finished parent has no reader: the cancel still succeeds.
        const done = await started();
        await release(done, { status: "completed", output: '"x"' });
        const { run: orphan } = await store.createRun(
          newRun({ workflow: "kid", parentId: done.id }),
        );
        const res = await store.requestCancel(orphan.id, "x", {
          parentEvent: { name: "n", payload: "1" },
        });
        expect(res.state).toBe("canceled");
        expect((await store.loadJournal(done.id)).events).toEqual([]);
        for (const r of await store.listRuns()) {
          expect((await store.loadJournal(r.id)).events, r.id).toEqual([]);
        }
      });

      it("reports finished runs and is idempotent on canceled ones", async () => {
        const done = await started();
        await release(done, { status: "completed", output: '"x"' });
        const failed = await started();
        await release(failed, { status: "failed", error: { name: "Error", message: "m" } });
        for (const r of [done, failed]) {
          const out = await store.requestCancel(r.id, "stop");
          expect(out.state).toBe("finished");
          if (out.state === "finished") expect(out.run).toEqual(await store.getRun(r.id));
        }
        const { run } = await store.createRun(newRun());
        const first = await store.requestCancel(run.id, "first");
        advance(MINUTE);
        const second = await store.requestCancel(run.id, "second");
        expect(second).toEqual(first);
        expect(await store.requestCancel("run_nope", "x")).toEqual({ state: "not-found" });
      });
    });

    describe("resumeRun", () => {
      it("a failed run keeps the calls whose errors failed it, one per failure, by generation", async () => {
        const run = await started();
        expect(run.failedCalls).toEqual([]);
        const failed = await release(run, {
          status: "failed",
          error: { name: "FatalError", code: "FATAL", message: "no" },
          failedKeys: ["k#2"],
        });
        expect(failed.failedCalls).toEqual([{ key: "k#2", generation: run.generation }]);
        const resumed = await store.resumeRun(run.id, {});
        if (!resumed.ok) throw new Error("resume refused");
        expect(resumed.run.generation).toBe(run.generation + 1);
        expect(resumed.run.failedCalls).toEqual(failed.failedCalls);
        const again = (await claim(run.id, "worker-2")).run;
        const twice = await release(again, {
          status: "failed",
          error: { name: "Error", message: "thrown by the workflow" },
          failedKeys: [],
        });
        expect(twice.failedCalls).toEqual(failed.failedCalls);
        const third = await store.resumeRun(run.id, {});
        if (!third.ok) throw new Error("resume refused");
        const claimed = (await claim(run.id, "worker-3")).run;
        const last = await release(claimed, {
          status: "failed",
          error: { name: "Error", message: "x" },
          failedKeys: ["j", "any-of#2"],
        });
        // Several: Promise.any failed the run (every branch failed), in the order given.
        expect(last.failedCalls).toEqual([
          { key: "k#2", generation: run.generation },
          { key: "j", generation: run.generation + 2 },
          { key: "any-of#2", generation: run.generation + 2 },
        ]);
      });

      it("a paused run becomes pending now, budget limits merged", async () => {
        const run = await started({ budgetLimit: { tokens: 1000, usd: 5 } });
        await release(run, {
          status: "paused",
          pausedFor: "budget",
          reason: "usd over 5",
          readyAt: null,
        });
        advance(MINUTE);
        const out = await store.resumeRun(run.id, { budgetLimit: { usd: 10, calls: 3 } });
        if (!out.ok) throw new Error("resume refused");
        expect(out.run).toMatchObject({
          status: "pending",
          reason: null,
          pausedFor: null,
          budgetLimit: { tokens: 1000, usd: 10, calls: 3 },
          generation: run.generation,
        });
        expectNear(out.run.readyAt, CONTRACT_T0 + MINUTE);
        expect(await store.getRun(run.id)).toEqual(out.run);
      });

      it("a failed run gets generation + 1 and its error cleared", async () => {
        const run = await started();
        await release(run, {
          status: "failed",
          error: { name: "Error", message: "boom" },
          reason: "boom",
        });
        const out = await store.resumeRun(run.id, {});
        if (!out.ok) throw new Error("resume refused");
        expect(out.run).toMatchObject({
          status: "pending",
          error: null,
          generation: run.generation + 1,
          budgetLimit: {},
        });
        expect((await claim(run.id, "worker-2")).run.generation).toBe(run.generation + 1);
      });

      it("refuses other statuses and unknown runs", async () => {
        const running = await started();
        const waiting = await started();
        await release(waiting, { status: "waiting", readyAt: null, waitingFor: ["x"] });
        const done = await started();
        await release(done, { status: "completed", output: null });
        const { run: pending } = await store.createRun(newRun());
        const { run: canceled } = await store.createRun(newRun());
        await store.requestCancel(canceled.id, "stop");
        for (const id of [pending.id, running.id, waiting.id, done.id, canceled.id]) {
          const before = await mustGet(id);
          expect(await store.resumeRun(id, { budgetLimit: { usd: 1 } })).toEqual({
            ok: false,
            reason: "status",
            run: before,
          });
          expect(await store.getRun(id)).toEqual(before);
        }
        expect(await store.resumeRun("run_nope", {})).toEqual({ ok: false, reason: "not-found" });
      });

      it("refuses a failed child whose parent was canceled; a failed parent's child resumes", async () => {
        const parent = await started();
        await release(parent, { status: "waiting", readyAt: null, waitingFor: ["x"] });
        const child = await started({ parentId: parent.id });
        await release(child, { status: "failed", error: { name: "Error", message: "no" } });
        await store.requestCancel(parent.id, "stop");
        const before = await mustGet(child.id);
        expect(await store.resumeRun(child.id, {})).toEqual({
          ok: false,
          reason: "parent-canceled",
          run: before,
        });
        expect(await store.getRun(child.id)).toEqual(before);

        const failedParent = await started();
        await release(failedParent, { status: "failed", error: { name: "Error", message: "no" } });
        const kid = await started({ parentId: failedParent.id });
        await release(kid, { status: "failed", error: { name: "Error", message: "no" } });
        expect(await store.resumeRun(kid.id, {})).toMatchObject({ ok: true });
      });
    });

    describe("forkRun", () => {
      it("copies the named step records and every attempt of their keys; the source is untouched", async () => {
        const src = await started({ budgetLimit: { usd: 3 } });
        const steps = [0, 1, 2, 3].map((i) =>
          step(src.id, `k${i}`, i, { spend: { tokens: 10 ** i }, attempt: i === 1 ? 2 : 1 }),
        );
        const attempts = [
          attempt(src.id, "k1", 1, { spend: { tokens: 1000 } }),
          attempt(src.id, "k3", 1, { spend: { tokens: 5000 } }),
        ];
        await store.appendRecords([
          {
            runId: src.id,
            epoch: src.epoch,
            steps,
            attempts,
            intents: [intent(src.id, "k2")],
          },
        ]);
        await store.sendEvent({ runId: src.id, name: "e", payload: "1" });
        const srcRun = await mustGet(src.id);
        const srcJournal = await store.loadJournal(src.id);

        advance(MINUTE);
        const out = await store.forkRun({
          sourceId: src.id,
          run: newRun({ id: "run_fork", input: '"new input"', budgetLimit: { usd: 9 } }),
          copy: [
            { key: "k0", generation: 0 },
            { key: "k1", generation: 0 },
          ],
        });
        expect(out.created).toBe(true);
        expect(out.run).toMatchObject({
          id: "run_fork",
          status: "pending",
          input: '"new input"',
          budgetLimit: { usd: 9 },
          budgetSpent: { tokens: 1011 },
          failedCalls: [],
        });
        expectNear(out.run.readyAt, CONTRACT_T0 + MINUTE);
        const j = await store.loadJournal("run_fork");
        expect(j.steps).toEqual(steps.slice(0, 2).map((s) => ({ ...s, runId: "run_fork" })));
        expect(j.attempts).toEqual([
          { ...attempts[0]!, runId: "run_fork", generation: out.run.generation },
        ]);
        expect(j.events).toEqual([]);
        expect(await store.getRun(src.id)).toEqual(srcRun);
        expect(await store.loadJournal(src.id)).toEqual(srcJournal);
      });

      it("copies the intent of each copied child or approval record, and no other intent", async () => {
        const src = await started();
        const child = (key: string, seq: number) =>
          step(src.id, key, seq, { kind: "child", name: key });
        const childIntent = (key: string) =>
          intent(src.id, key, { kind: "child", name: key, data: `{"childId":"${key}"}` });
        const approvalIntent = (key: string) =>
          intent(src.id, key, {
            kind: "approval",
            name: key,
            data: `{"request":"d-${key}"}`,
            // After the children's: intents are read back in order of creation.
            createdAt: CONTRACT_T0 + 1,
          });
        await store.appendRecords([
          {
            runId: src.id,
            epoch: src.epoch,
            // c0, a0 copied with their intents; c1, a1 not copied; e0 an effect's intent; c2
            // unfinished.
            steps: [
              child("c0", 0),
              child("c1", 1),
              step(src.id, "e0", 2, { kind: "effect" }),
              step(src.id, "a0", 3, { kind: "approval", name: "a0" }),
              step(src.id, "a1", 4, { kind: "approval", name: "a1" }),
            ],
            intents: [
              childIntent("c0"),
              childIntent("c1"),
              intent(src.id, "e0"),
              childIntent("c2"),
              approvalIntent("a0"),
              approvalIntent("a1"),
            ],
          },
        ]);
        await store.forkRun({
          sourceId: src.id,
          run: newRun({ id: "run_fork_child" }),
          copy: [
            { key: "c0", generation: 0 },
            { key: "e0", generation: 0 },
            { key: "a0", generation: 0 },
          ],
        });
        const j = await store.loadJournal("run_fork_child");
        expect(j.intents).toEqual([
          { ...childIntent("c0"), runId: "run_fork_child" },
          { ...approvalIntent("a0"), runId: "run_fork_child" },
        ]);
      });

      it("a copy marked unordered gets issuedAfter null and the generation since; the others keep theirs", async () => {
        const src = await started();
        const steps = [0, 1].map((i) => step(src.id, `k${i}`, i));
        await store.appendRecords([{ runId: src.id, epoch: src.epoch, steps }]);
        await store.forkRun({
          sourceId: src.id,
          run: newRun({ id: "run_fork_unordered" }),
          copy: [
            { key: "k0", generation: 0, unordered: true, since: 1 },
            { key: "k1", generation: 0 },
          ],
        });
        const j = await store.loadJournal("run_fork_unordered");
        expect(j.steps.map((s) => [s.key, s.delivery, s.issuedAfter, s.generation])).toEqual([
          ["k0", 0, null, 1],
          ["k1", 1, 1, 0],
        ]);
      });

      it("copies the named generation of a key, and its attempts of every generation, renumbered", async () => {
        const src = await started();
        const g0 = attempt(src.id, "k0", 1, { spend: { t: 4 } });
        const failure = step(src.id, "k0", 0, {
          outcome: "error",
          result: null,
          error: { name: "Error", message: "x" },
        });
        await store.appendRecords([
          { runId: src.id, epoch: src.epoch, attempts: [g0], steps: [failure] },
        ]);
        await release(src, {
          status: "failed",
          error: { name: "Error", message: "x" },
          failedKeys: ["k0"],
        });
        const resumed = await store.resumeRun(src.id, {});
        if (!resumed.ok) throw new Error("resume refused");
        const again = (await claim(src.id, "worker-2")).run;
        const g1 = attempt(src.id, "k0", 1, { generation: again.generation, spend: { t: 2 } });
        const ok = step(src.id, "k0", 0, {
          generation: again.generation,
          attempt: 2,
          spend: { t: 1 },
          delivery: 1,
        });
        await store.appendRecords([
          { runId: src.id, epoch: again.epoch, attempts: [g1], steps: [ok] },
        ]);
        const out = await store.forkRun({
          sourceId: src.id,
          run: newRun({ id: "run_fork" }),
          copy: [{ key: "k0", generation: again.generation }],
        });
        expect(out.run.budgetSpent).toEqual({ t: 7 });
        const j = await store.loadJournal("run_fork");
        expect(j.steps).toEqual([{ ...ok, runId: "run_fork", generation: out.run.generation }]);
        expect(j.attempts).toEqual([
          { ...g0, runId: "run_fork", generation: out.run.generation, attempt: 1 },
          { ...g1, runId: "run_fork", generation: out.run.generation, attempt: 2 },
        ]);
      });

      it("returns created=false and changes nothing when the id exists", async () => {
        const src = await started();
        await store.appendRecords([
          { runId: src.id, epoch: src.epoch, steps: [step(src.id, "a", 0)] },
        ]);
        const { run: existing } = await store.createRun(newRun({ id: "run_taken" }));
        const out = await store.forkRun({
          sourceId: src.id,
          run: newRun({ id: "run_taken" }),
          copy: [{ key: "a", generation: 0 }],
        });
        expect(out).toEqual({ run: existing, created: false });
        expect((await store.loadJournal("run_taken")).steps).toEqual([]);
      });

      it("rejects an unknown source and creates nothing", async () => {
        await expect(
          store.forkRun({ sourceId: "run_nope", run: newRun({ id: "run_f" }), copy: [] }),
        ).rejects.toBeInstanceOf(Error);
        expect(await store.getRun("run_f")).toBeUndefined();
      });
    });

    describe("markUnserved", () => {
      it("pauses ready runs of unserved versions after the grace period", async () => {
        const waiting = await started({ workflow: "beta" });
        const future = await started({ workflow: "beta" });
        await release(waiting, { status: "waiting", readyAt: CONTRACT_T0, waitingFor: [] });
        await release(future, { status: "pending", readyAt: CONTRACT_T0 + 60 * MINUTE });
        const { run: served } = await store.createRun(newRun({ workflow: "alpha" }));
        const { run: unserved } = await store.createRun(newRun({ workflow: "beta" }));
        advance(10 * MINUTE);
        const { run: fresh } = await store.createRun(newRun({ workflow: "beta" }));

        const p = { served: ["alpha@1"], graceMs: 5 * MINUTE };
        expect(await store.markUnserved(p)).toBe(2);
        for (const id of [unserved.id, waiting.id]) {
          const r = await mustGet(id);
          expect(r.status, id).toBe("paused");
          expect(r.pausedFor, id).toBe("version");
          expect(r.reason, id).toContain("beta@1");
        }
        expect((await mustGet(served.id)).status).toBe("pending");
        expect((await mustGet(fresh.id)).status).toBe("pending");
        expect((await mustGet(future.id)).status).toBe("pending");
        expect(await store.markUnserved(p)).toBe(0);

        // Once a worker serves the version, the paused runs are claimable as they are.
        const claimed = await store.claimRuns({
          workerId: "worker-3",
          workflows: ["beta@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => c.run.id).sort()).toEqual(
          [unserved.id, waiting.id, fresh.id].sort(),
        );
        for (const c of claimed) expect(c.run.status).toBe("running");
      });

      it("pauses a running run of an unserved version whose lease expired, fencing its worker", async () => {
        const lost = await started({ workflow: "beta" });
        advance(LEASE_MS + 10 * MINUTE);
        const live = await started({ workflow: "beta" });
        const p = { served: ["alpha@1"], graceMs: 5 * MINUTE };
        expect(await store.markUnserved(p)).toBe(1);
        const r = await mustGet(lost.id);
        expect(r.status).toBe("paused");
        expect(r.pausedFor).toBe("version");
        expect(r.reason).toBe("no live worker has beta@1");
        expect(r.leaseOwner).toBeNull();
        expect(r.epoch).toBeGreaterThan(lost.epoch);
        expect((await mustGet(live.id)).status).toBe("running");
        const late = await store.appendRecords([{ runId: lost.id, epoch: lost.epoch, steps: [] }]);
        expect(late[0]).toEqual({ ok: false, reason: "lease-lost" });
      });

      it("a running run it pauses is claimed as recovered (its worker's crash still to charge), once", async () => {
        const lost = await started({ workflow: "beta" });
        const pending = await store.createRun(newRun({ workflow: "beta" }));
        advance(LEASE_MS + 10 * MINUTE);
        expect(await store.markUnserved({ served: ["alpha@1"], graceMs: 5 * MINUTE })).toBe(2);
        // Resumed meanwhile: still as the crash left it.
        expect((await store.resumeRun(lost.id, {})).ok).toBe(true);
        const claim = { workerId: "worker-3", workflows: ["beta@1"], limit: 10, leaseMs: LEASE_MS };
        const claimed = await store.claimRuns(claim);
        expect(Object.fromEntries(claimed.map((c) => [c.run.id, c.recovered]))).toEqual({
          [lost.id]: true,
          [pending.run.id]: false,
        });
        // Released to pending by its claimer, it is an ordinary run again.
        const c = claimed.find((x) => x.run.id === lost.id)!;
        await release(c.run, { readyAt: CONTRACT_T0 });
        const again = await store.claimRuns(claim);
        expect(again.map((x) => [x.run.id, x.recovered])).toEqual([[lost.id, false]]);
      });

      it("a run released paused with crashUnjudged is claimed as recovered after its resume, once", async () => {
        const run = await started({ workflow: "beta" });
        const other = await started({ workflow: "gamma" });
        await release(run, { status: "paused", reason: "stuck", crashUnjudged: true });
        // Only a pause keeps the mark.
        await release(other, { status: "pending", readyAt: CONTRACT_T0, crashUnjudged: true });
        expect((await store.resumeRun(run.id, {})).ok).toBe(true);
        const claim = { workflows: ["beta@1", "gamma@1"], limit: 10, leaseMs: LEASE_MS };
        const claimed = await store.claimRuns({ ...claim, workerId: "worker-3" });
        expect(Object.fromEntries(claimed.map((c) => [c.run.id, c.recovered]))).toEqual({
          [run.id]: true,
          [other.id]: false,
        });
        const c = claimed.find((x) => x.run.id === run.id)!;
        await release(c.run, { status: "paused", reason: "stuck again" });
        expect((await store.resumeRun(run.id, {})).ok).toBe(true);
        const again = await store.claimRuns({ ...claim, workerId: "worker-4" });
        expect(again.map((x) => [x.run.id, x.recovered])).toEqual([[run.id, false]]);
      });
    });

    describe("listChildrenOfCanceled (optional)", () => {
      it("lists the unfinished children of canceled runs with no cancel asked, at most `limit`", async () => {
        const list = store.listChildrenOfCanceled?.bind(store);
        if (!list) return; // a store without it is not swept
        const { run: parent } = await store.createRun(newRun());
        const { run: live } = await store.createRun(newRun());
        const child = (over: Partial<NewRun> = {}) => newRun({ parentId: parent.id, ...over });
        const { run: pending } = await store.createRun(child());
        const waiting = await started(child({ workflow: "beta" }));
        await release(waiting, { status: "waiting", waitingFor: ["go"] });
        const paused = await started(child({ workflow: "gamma" }));
        await release(paused, { status: "paused", pausedFor: "budget", reason: "over" });
        const running = await started(child({ workflow: "delta" }));
        const asked = await started(child({ workflow: "epsilon" }));
        expect((await store.requestCancel(asked.id, "asked")).state).toBe("requested");
        const completed = await started(child({ workflow: "zeta" }));
        await release(completed, { status: "completed", output: "1" });
        const failed = await started(child({ workflow: "eta" }));
        await release(failed, { status: "failed", error: { name: "Error", message: "x" } });
        const { run: canceled } = await store.createRun(child());
        await store.requestCancel(canceled.id, "before");
        // Children of an unfinished parent, and runs with no parent, are not listed.
        await store.createRun(newRun({ parentId: live.id }));
        expect(await list({ limit: 100 })).toEqual([]);

        expect((await store.requestCancel(parent.id, "stop")).state).toBe("canceled");
        const found = await list({ limit: 100 });
        const sorted = (rows: Array<{ runId: string; parentId: string }>) =>
          [...rows].sort((a, b) => a.runId.localeCompare(b.runId));
        expect(sorted(found)).toEqual(
          sorted(
            [pending, waiting, paused, running].map((r) => ({ runId: r.id, parentId: parent.id })),
          ),
        );
        const two = await list({ limit: 2 });
        expect(two).toHaveLength(2);
        for (const row of two) expect(found).toContainEqual(row);
        // Canceled (as the sweep does), a child is listed no more.
        await store.requestCancel(pending.id, "its parent was canceled");
        expect((await list({ limit: 100 })).map((r) => r.runId)).not.toContain(pending.id);
      });
    });

    // ---- workers ----

    describe("workers", () => {
      it("a worker row keeps the worker's own lease (null when it gave none)", async () => {
        await store.registerWorker({
          id: "w-long",
          host: "h",
          pid: 1,
          workflows: [],
          leaseMs: 120_000,
        });
        await store.registerWorker({ id: "w-plain", host: "h", pid: 2, workflows: [] });
        const byId = new Map((await store.listWorkers()).map((w) => [w.id, w]));
        expect(byId.get("w-long")?.leaseMs).toBe(120_000);
        expect(byId.get("w-plain")?.leaseMs ?? null).toBeNull();
      });

      it("register, heartbeat, replace, list", async () => {
        await store.registerWorker({ id: "w-a", host: "h1", pid: 11, workflows: ["alpha@1"] });
        await store.registerWorker({ id: "w-b", host: "h2", pid: 22, workflows: [] });
        expect(await store.listWorkers()).toHaveLength(2);
        advance(MINUTE);
        await store.heartbeatWorker("w-a");
        await store.heartbeatWorker("w-unknown");
        const a = (await store.listWorkers()).find((w) => w.id === "w-a");
        expect(a).toMatchObject({ host: "h1", pid: 11, workflows: ["alpha@1"] });
        expectNear(a?.startedAt, CONTRACT_T0);
        expectNear(a?.heartbeatAt, CONTRACT_T0 + MINUTE);
        expect(a!.heartbeatAt - a!.startedAt).toBeGreaterThan(MINUTE / 2);

        await store.registerWorker({
          id: "w-a",
          host: "h9",
          pid: 99,
          workflows: ["alpha@1", "beta@2"],
        });
        const all = await store.listWorkers();
        expect(all.map((w) => w.id).sort()).toEqual(["w-a", "w-b"]);
        expect(all.find((w) => w.id === "w-a")).toMatchObject({
          host: "h9",
          pid: 99,
          workflows: ["alpha@1", "beta@2"],
        });
      });

      it("stores each worker's PID namespace identity; null when not given", async () => {
        await store.registerWorker({
          id: "w-ns",
          host: "h",
          pid: 7,
          pidNamespace: "linux:boot:pidns:4026531836",
          workflows: [],
        });
        await store.registerWorker({ id: "w-none", host: "h", pid: 8, workflows: [] });
        const byId = new Map((await store.listWorkers()).map((w) => [w.id, w]));
        expect(byId.get("w-ns")?.pidNamespace).toBe("linux:boot:pidns:4026531836");
        expect(byId.get("w-none")?.pidNamespace).toBeNull();
        await store.registerWorker({ id: "w-ns", host: "h", pid: 9, workflows: [] });
        expect((await store.listWorkers()).find((w) => w.id === "w-ns")?.pidNamespace).toBeNull();
      });

      it("removeWorker deletes the row and makes its leased runs claimable now", async () => {
        await store.registerWorker({ id: "worker-1", host: "h", pid: 1, workflows: ["alpha@1"] });
        const run = await started();
        const { run: other } = await store.createRun(newRun());
        await claim(other.id, "worker-9");
        advance(LEASE_MS / 4);
        await store.removeWorker("worker-1");
        expect(await store.listWorkers()).toEqual([]);
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => [c.run.id, c.recovered])).toEqual([[run.id, true]]);
        // Another worker's lease is not affected.
        expect((await mustGet(other.id)).leaseOwner).toBe("worker-9");
      });

      it("removeWorker ends the worker's holds, not another's; with expireLeases: false it keeps them", async () => {
        const failed = { status: "failed", error: { name: "Error", message: "x" } } as const;
        const heldFor = (workerId: string) => ({ workerId, ms: 10 * MINUTE });
        const [dead, alive, kept] = [await started(), await started(), await started()];
        await release(dead, { ...failed, heldFor: heldFor("worker-1") });
        await release(alive, { ...failed, heldFor: heldFor("worker-3") });
        await release(kept, { ...failed, heldFor: heldFor("worker-4") });
        for (const r of [dead, alive, kept]) {
          expect((await store.resumeRun(r.id, {})).ok).toBe(true);
        }
        const finishedAt = (await mustGet(dead.id)).updatedAt;
        advance(LEASE_MS / 4);
        await store.removeWorker("worker-1");
        await store.removeWorker("worker-4", { expireLeases: false });
        const unheld = await mustGet(dead.id);
        expect([unheld.heldBy, unheld.heldUntil]).toEqual([null, null]);
        // Not a change of the run's own: retention goes by a finished run's updatedAt.
        expect(unheld.updatedAt).toBe(finishedAt);
        const claimed = await store.claimRuns({
          workerId: "worker-2",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: LEASE_MS,
        });
        expect(claimed.map((c) => c.run.id)).toEqual([dead.id]);
        expect((await mustGet(alive.id)).heldBy).toBe("worker-3");
        expect((await mustGet(kept.id)).heldBy).toBe("worker-4");
      });

      it("removeWorker with expireLeases: false deletes only the row; its runs wait for their leases", async () => {
        await store.registerWorker({ id: "worker-1", host: "h", pid: 1, workflows: ["alpha@1"] });
        const run = await started();
        advance(LEASE_MS / 4);
        await store.removeWorker("worker-1", { expireLeases: false });
        expect(await store.listWorkers()).toEqual([]);
        const claim2 = () =>
          store.claimRuns({
            workerId: "worker-2",
            workflows: ["alpha@1"],
            limit: 10,
            leaseMs: LEASE_MS,
          });
        expect(await claim2()).toEqual([]);
        expect((await mustGet(run.id)).leaseOwner).toBe("worker-1");
        advance(LEASE_MS);
        expect((await claim2()).map((c) => c.run.id)).toEqual([run.id]);
      });
    });

    // ---- hints ----

    describe("subscribe", () => {
      it("hints on createRun, sendEvent, requestCancel and release; unsubscribe stops", async () => {
        const hints: StoreHint[] = [];
        const unsubscribe = store.subscribe((h) => hints.push(h));
        const has = (kind: StoreHint["kind"], runId?: string) =>
          hints.some((h) => h.kind === kind && (runId === undefined || h.runId === runId));

        const { run } = await store.createRun(newRun());
        await waitFor(
          () => hints.some((h) => h.kind === "runnable" && (h.runId ?? run.id) === run.id),
          "a runnable hint after createRun",
        );

        const c = (await claim(run.id)).run;
        await release(c, { status: "waiting", readyAt: null, waitingFor: ["go"] });
        hints.length = 0;
        await store.sendEvent({ runId: run.id, name: "go", payload: "1" });
        await waitFor(() => has("runnable"), "a runnable hint after sendEvent");

        const c2 = (await claim(run.id)).run;
        await store.requestCancel(run.id, "stop");
        await waitFor(() => has("cancel", run.id), "a cancel hint for the run");

        await release(c2, { status: "completed", output: null });
        await waitFor(() => has("finished", run.id), "a finished hint for the run");

        const others: StoreHint[] = [];
        const unsubscribeOther = store.subscribe((h) => others.push(h));
        unsubscribe();
        hints.length = 0;
        await store.createRun(newRun());
        await waitFor(() => others.length > 0, "a hint to the remaining subscriber");
        expect(hints).toEqual([]);
        unsubscribeOther();
      });
    });

    // ---- hostile input ----

    describe("hostile identifiers and payloads", () => {
      const hostile = [
        "'; DROP TABLE runs; --",
        'run_"quoted"\\back`tick`$1%_?',
        "ünïcødé_🚀_中文_עברית_\u200b",
        "line\nbreak\ttab\r",
      ];

      it("stores hostile ids, names and keys verbatim and never executes them", async () => {
        for (const id of hostile) {
          const { run, created } = await store.createRun(
            newRun({ id, workflow: id, version: id, parentId: id }),
          );
          expect(created).toBe(true);
          expect(run).toMatchObject({ id, workflow: id, version: id, parentId: id });
          const c = await claim(id, id, [`${id}@${id}`]);
          expect(c.run.leaseOwner).toBe(id);
          const ev = await store.sendEvent({ runId: id, name: id, payload: JSON.stringify(id) });
          if (!ev.ok) throw new Error("refused");
          const s = step(id, id, 0, { name: id, kind: "wait" });
          expect(
            await store.appendRecords([
              {
                runId: id,
                epoch: c.run.epoch,
                steps: [s],
                intents: [intent(id, id, { name: id })],
                attempts: [attempt(id, id, 1, { spend: { [id]: 1 } })],
                consume: [{ eventSeq: ev.event.seq, key: id }],
              },
            ]),
          ).toEqual([{ ok: true }]);
          const j = await store.loadJournal(id);
          expect(j.steps).toEqual([s]);
          expect(j.intents[0]?.key).toBe(id);
          expect((await mustGet(id)).budgetSpent).toEqual({ [id]: 1 });
          expect(ids(await store.listRuns({ workflow: id }))).toEqual([id]);
          expect(ids(await store.listRuns({ parentId: id }))).toEqual([id]);
          await store.registerWorker({ id, host: id, pid: 1, workflows: [`${id}@${id}`] });
        }
        expect((await store.listRuns()).map((r) => r.id).sort()).toEqual([...hostile].sort());
        expect((await store.listWorkers()).map((w) => w.id).sort()).toEqual([...hostile].sort());
      });

      it("a 10 KB id is stored verbatim or refused with a CairnError, never half-stored", async () => {
        const long = `run_${"ж🚀x".repeat(2_600)}`.slice(0, 10_240);
        let stored = true;
        try {
          await store.createRun(newRun({ id: long, workflow: long }));
        } catch (err) {
          stored = false;
          expect(err).toBeInstanceOf(CairnError);
        }
        if (stored) {
          expect((await mustGet(long)).workflow).toBe(long);
          expect(ids(await store.listRuns())).toEqual([long]);
        } else {
          expect(await store.listRuns()).toEqual([]);
        }
      });

      it("round-trips payloads byte for byte", async () => {
        const payloads = [
          "",
          '{"a":[1,2,{"b":null}],"c":"\\u0000 escaped"}',
          "ünïcødé 🚀 中文 \u{1F600} \u00e9 vs e\u0301",
          "\u0001\u0002\u001f\u007f control chars, 'quotes' \"double\" \\ back",
          `${"0123456789abcdef".repeat(65_536)}`, // 1 MiB
          "\n\r\n\t  leading and trailing whitespace  \n",
        ];
        for (const payload of payloads) {
          const { run } = await store.createRun(newRun({ input: payload }));
          expect((await mustGet(run.id)).input).toBe(payload);
          const c = (await claim(run.id)).run;
          const ev = await store.sendEvent({ runId: run.id, name: "p", payload });
          if (!ev.ok) throw new Error("refused");
          const s = step(run.id, "s", 0, { result: payload });
          const i = intent(run.id, "i", { data: payload });
          const a = attempt(run.id, "s", 1, {
            error: { name: "Error", message: payload, stack: payload },
          });
          await store.appendRecords([
            { runId: run.id, epoch: c.epoch, steps: [s], intents: [i], attempts: [a] },
          ]);
          const j = await store.loadJournal(run.id);
          expect(j.steps[0]?.result).toBe(payload);
          expect(j.intents[0]?.data).toBe(payload);
          expect(j.attempts[0]?.error.message).toBe(payload);
          expect(j.events[0]?.payload).toBe(payload);
          const done = await release(c, { status: "completed", output: payload });
          expect(done.output).toBe(payload);
          expect((await mustGet(run.id)).output).toBe(payload);
        }
      });
    });

    // ---- shared rate limits and run streams (cairn/ai) ----

    describe("shared rate limits", () => {
      const SECOND = 1_000;
      let grants = 0;
      const take = (
        key: string,
        limits: Parameters<Store["acquireRate"]>[0]["limits"],
        tokens = 0,
      ) => store.acquireRate({ key, grantId: `g${++grants}`, tokens, limits });

      it("grants requestsPerMinute in a rolling minute, then says when the oldest grant leaves it", async () => {
        const limits = { requestsPerMinute: 3 };
        for (let i = 0; i < 3; i++) {
          expect(await take("openai:gpt", limits)).toEqual({ granted: true });
          advance(10 * SECOND);
        }
        // t0+30 s: three grants (t0, t0+10 s, t0+20 s) in the window.
        expect(await take("openai:gpt", limits)).toEqual({ granted: false, waitMs: 30 * SECOND });
        advance(30 * SECOND);
        expect(await take("openai:gpt", limits)).toEqual({ granted: true });
        advance(SECOND);
        expect(await take("openai:gpt", limits)).toEqual({ granted: false, waitMs: 9 * SECOND });
      });

      it("counts tokens per minute; settleRate corrects a grant; one request never needs more than a minute's allowance", async () => {
        const limits = { tokensPerMinute: 100 };
        const first = { key: "m", grantId: "first", tokens: 60, limits };
        expect(await store.acquireRate(first)).toEqual({ granted: true });
        advance(5 * SECOND);
        expect(await take("m", limits, 50)).toEqual({ granted: false, waitMs: 55 * SECOND });
        await store.settleRate({ key: "m", grantId: "first", tokens: 30 });
        expect(await take("m", limits, 50)).toEqual({ granted: true });
        // 80 used: a request of 500 counts as 100 and waits until the window is empty.
        expect(await take("m", limits, 500)).toEqual({ granted: false, waitMs: 60 * SECOND });
        advance(60 * SECOND);
        expect(await take("m", limits, 500)).toEqual({ granted: true });
        expect(await take("m", limits, 1)).toEqual({ granted: false, waitMs: 60 * SECOND });
      });

      it("is idempotent on the grant id: asking again for a held grant takes nothing more", async () => {
        const limits = { requestsPerMinute: 2 };
        const g = { key: "k", grantId: "same", tokens: 1, limits };
        expect(await store.acquireRate(g)).toEqual({ granted: true });
        expect(await store.acquireRate(g)).toEqual({ granted: true });
        expect(await take("k", limits)).toEqual({ granted: true });
        expect((await take("k", limits)).granted).toBe(false);
      });

      it("blockRate stops every acquirer until it ends; a shorter block keeps the longer one; keys are independent", async () => {
        await store.blockRate({ key: "anthropic:claude", forMs: 30 * SECOND });
        await store.blockRate({ key: "anthropic:claude", forMs: 10 * SECOND });
        expect(await take("anthropic:claude", {})).toEqual({ granted: false, waitMs: 30 * SECOND });
        expect(await take("openai:gpt", {})).toEqual({ granted: true });
        advance(30 * SECOND);
        expect(await take("anthropic:claude", {})).toEqual({ granted: true });
        // A block on a key never used before creates its limiter.
        await store.blockRate({ key: "fresh", forMs: 5 * SECOND });
        expect(await take("fresh", { requestsPerMinute: 10 })).toEqual({
          granted: false,
          waitMs: 5 * SECOND,
        });
      });

      it("concurrent acquirers share one window: exactly the limit is granted", async () => {
        const limits = { requestsPerMinute: 5, tokensPerMinute: 1_000 };
        const outcomes = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            store.acquireRate({ key: "busy", grantId: `c${i}`, tokens: 10, limits }),
          ),
        );
        expect(outcomes.filter((o) => o.granted).length).toBe(5);
        for (const o of outcomes) if (!o.granted) expect(o.waitMs).toBe(60 * SECOND);
      });
    });

    describe("run streams", () => {
      it("hands out offsets from 0 in append order and reads from any offset, byte for byte", async () => {
        const { run } = await store.createRun(newRun());
        const chunks = ["a", "ünïcødé 🚀 \\u0000 escaped", "\n  ", "x".repeat(100_000)];
        expect(await store.appendStream({ runId: run.id, chunks: chunks.slice(0, 2) })).toEqual({
          ok: true,
          offset: 0,
        });
        advance(1_000);
        expect(await store.appendStream({ runId: run.id, chunks: chunks.slice(2) })).toEqual({
          ok: true,
          offset: 2,
        });
        const all = await store.readStream({ runId: run.id, from: 0 });
        expect(all.map((c) => c.data)).toEqual(chunks);
        expect(all.map((c) => c.offset)).toEqual([0, 1, 2, 3]);
        expect(all[0]?.createdAt).toBe(CONTRACT_T0);
        expect(all[3]?.createdAt).toBe(CONTRACT_T0 + 1_000);
        const tail = await store.readStream({ runId: run.id, from: 1, limit: 2 });
        expect(tail.map((c) => c.offset)).toEqual([1, 2]);
        expect(await store.readStream({ runId: run.id, from: 4 })).toEqual([]);
      });

      it("keeps one stream per run and refuses a run that does not exist", async () => {
        const a = (await store.createRun(newRun())).run;
        const b = (await store.createRun(newRun())).run;
        await store.appendStream({ runId: a.id, chunks: ["a0", "a1"] });
        expect(await store.appendStream({ runId: b.id, chunks: ["b0"] })).toEqual({
          ok: true,
          offset: 0,
        });
        expect((await store.readStream({ runId: b.id, from: 0 })).map((c) => c.data)).toEqual([
          "b0",
        ]);
        expect(await store.appendStream({ runId: "nope", chunks: ["x"] })).toEqual({
          ok: false,
          reason: "not-found",
        });
        expect(await store.readStream({ runId: "nope", from: 0 })).toEqual([]);
      });

      // Its followers end at one more read after the run's finished status: a chunk stored
      // after that status (a call's slow append it no longer waited for, a zombie worker's)
      // would be missed by every follower that had ended.
      it("refuses an append once the run has finished, and takes appends again once it is resumed", async () => {
        const run = await started();
        await store.appendStream({ runId: run.id, chunks: ["before"] });
        await release(run, { status: "failed", error: { name: "Error", message: "x" } });
        expect(await store.appendStream({ runId: run.id, chunks: ["late"] })).toEqual({
          ok: false,
          reason: "finished",
        });
        expect((await store.readStream({ runId: run.id, from: 0 })).map((c) => c.data)).toEqual([
          "before",
        ]);
        expect((await store.resumeRun(run.id, {})).ok).toBe(true);
        expect(await store.appendStream({ runId: run.id, chunks: ["again"] })).toEqual({
          ok: true,
          offset: 1,
        });
        const done = await claim(run.id);
        await release(done.run, { status: "completed", output: "1" });
        expect(await store.appendStream({ runId: run.id, chunks: ["zombie"] })).toEqual({
          ok: false,
          reason: "finished",
        });
        expect((await store.readStream({ runId: run.id, from: 0 })).map((c) => c.data)).toEqual([
          "before",
          "again",
        ]);
      });

      it("concurrent appends to one run get distinct offsets with no gaps, each batch in one piece", async () => {
        const { run } = await store.createRun(newRun());
        const outcomes = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            store.appendStream({ runId: run.id, chunks: [`${i}.0`, `${i}.1`, `${i}.2`] }),
          ),
        );
        const all = await store.readStream({ runId: run.id, from: 0 });
        expect(all.map((c) => c.offset)).toEqual(Array.from({ length: 60 }, (_, i) => i));
        outcomes.forEach((o, i) => {
          if (!o.ok) throw new Error("refused");
          expect(all.slice(o.offset, o.offset + 3).map((c) => c.data)).toEqual([
            `${i}.0`,
            `${i}.1`,
            `${i}.2`,
          ]);
        });
      });
    });
  });
}
