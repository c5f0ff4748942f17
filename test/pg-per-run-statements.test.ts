// What a run executed alone costs PostgreSQL, counted on the client (issue 13): a 20-step
// run started and awaited through the public API is 22 round trips (its create, one INSERT
// per step, its release), a 0-step run 2; each is a prepared statement, and none calls one
// of the schema's PL/pgSQL functions (release_runs cost about twice a step's server CPU,
// append_records as much). The lone release that does so (src/store/postgres/lone-release.ts)
// keeps release_runs's fencing and its answer to a retry after a commit whose answer was
// lost; a claim round and a lone create are prepared too. Counted, not timed: every
// pg.Client query of this process is seen here.

import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { Store, StoreHint } from "../src/store/store.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { claimedRun } from "./helpers/step-records.js";

const url = await postgresTestUrl();

interface Sent {
  name: string | undefined;
  text: string;
}

/** Every query any pg client of this process sends while `sent` is set; `lose` makes the
 *  next query of that name throw as a lost connection once the server has answered it. */
const seen: { sent: Sent[] | undefined; lose: Set<string> } = { sent: undefined, lose: new Set() };
const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const realQuery = proto.query;
proto.query = function (this: unknown, ...args: unknown[]) {
  const q = args[0] as string | { name?: string; text?: string };
  const name = typeof q === "string" ? undefined : q.name;
  const text = typeof q === "string" ? q : (q.text ?? "");
  seen.sent?.push({ name, text });
  const answer = realQuery.apply(this, args);
  if (name !== undefined && seen.lose.has(name)) {
    seen.lose.delete(name);
    return (answer as Promise<unknown>).then(() => {
      throw new Error("Connection terminated unexpectedly");
    });
  }
  return answer;
};

/** A background read the store makes about once a second while plain text is written
 *  (plain-payloads.ts), not a statement of any run. */
const isStoreMarkRead = (s: Sent) => s.text.includes("store_marks");

const steps = workflow(
  { name: "steps", version: "1" },
  async (ctx, input: { n: number }): Promise<number> => {
    let sum = 0;
    for (let i = 0; i < input.n; i++) sum += await ctx.step(`s${i}`, async () => i);
    return sum;
  },
);

describe.skipIf(!url)("PostgreSQL: the statements of a run executed alone", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    seen.sent = undefined;
    seen.lose.clear();
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  async function openStore(): Promise<Store> {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const store = postgresStore(base, { schema: t.schema });
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    return store;
  }

  /** The queries of `runs` runs of `n` steps, one after another, on an engine whose worker
   *  neither polls nor renews leases meanwhile (both are per second, not per run). */
  async function sentFor(runs: number, n: number): Promise<Sent[]> {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const engine = createEngine({
      store: postgresStore(base, { schema: t.schema }),
      workflows: [steps],
      pollIntervalMs: 600_000,
      leaseMs: 600_000,
    });
    cleanups.push(() => engine.close());
    // Opens the store, registers the worker, makes the connections and prepares.
    for (let i = 0; i < 3; i++) await (await engine.start(steps, { n })).result();
    const sent: Sent[] = [];
    seen.sent = sent;
    for (let i = 0; i < runs; i++) {
      expect(await (await engine.start(steps, { n })).result()).toBe(
        n === 0 ? 0 : (n * (n - 1)) / 2,
      );
    }
    seen.sent = undefined;
    return sent.filter((s) => !isStoreMarkRead(s));
  }

  function expectPreparedWithoutFunctions(sent: Sent[]): void {
    // Named: parsed and planned once per connection. No PL/pgSQL function: each statement
    // of its body is started anew on every call.
    expect(sent.filter((s) => s.name === undefined).map((s) => s.text.slice(0, 60))).toEqual([]);
    expect(
      sent.filter((s) => /release_runs|append_records/.test(s.text)).map((s) => s.name),
    ).toEqual([]);
  }

  it("a 20-step run is 22 round trips (create, 20 INSERTs, release), each prepared", async () => {
    const sent = await sentFor(5, 20);
    expect(sent.length / 5).toBeLessThanOrEqual(22);
    expectPreparedWithoutFunctions(sent);
  });

  it("a 0-step run is 2 round trips (create, release), each prepared", async () => {
    const sent = await sentFor(5, 0);
    expect(sent.length / 5).toBeLessThanOrEqual(2);
    expectPreparedWithoutFunctions(sent);
  });

  it("a claim round is one prepared statement", async () => {
    const store = await openStore();
    const sent: Sent[] = [];
    seen.sent = sent;
    await store.claimRuns({ workerId: "w9", workflows: ["alpha@1"], limit: 5, leaseMs: 1_000 });
    seen.sent = undefined;
    expect(sent.filter((s) => !isStoreMarkRead(s)).map((s) => s.name)).toEqual([
      "cairn_claim_runs",
    ]);
  });

  it("a lone completion is fenced: a stale epoch or a run no longer running is lease-lost, and changes nothing", async () => {
    const store = await openStore();
    const run = await claimedRun(store, "run_fenced");
    const stale = await store.releaseRun({
      runId: run.id,
      epoch: run.epoch - 1,
      status: "completed",
      output: "1",
      readyAt: null,
    });
    expect(stale).toEqual({ ok: false, reason: "lease-lost" });
    expect((await store.getRun(run.id))?.status).toBe("running");
    const done = await store.releaseRun({
      runId: run.id,
      epoch: run.epoch,
      status: "completed",
      output: "1",
      readyAt: null,
    });
    expect(done.ok && done.run.status).toBe("completed");
    // Released already under this epoch: a finished run is never rewritten.
    const again = await store.releaseRun({
      runId: run.id,
      epoch: run.epoch,
      status: "completed",
      output: "2",
      readyAt: null,
    });
    expect(again).toEqual({ ok: false, reason: "lease-lost" });
    expect((await store.getRun(run.id))?.output).toBe("1");
  });

  it("a lone completion that waits for a claim's row lock finds the new epoch: lease-lost, nothing written", async () => {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const store = postgresStore(base, { schema: t.schema });
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    const run = await claimedRun(store, "run_taken");
    await withClient(base, async (c) => {
      // Another worker's claim, holding the row until it commits.
      await c.query("BEGIN");
      await c.query(
        `UPDATE "${t.schema}".runs SET epoch = epoch + 1, lease_owner = 'w2' WHERE id = $1`,
        [run.id],
      );
      const release = store.releaseRun({
        runId: run.id,
        epoch: run.epoch,
        status: "completed",
        output: "1",
        readyAt: null,
      });
      // The release waits for the lock (it has not answered) until the claim commits.
      const early = await Promise.race([
        release.then(() => "answered"),
        new Promise((r) => setTimeout(() => r("waiting"), 300)),
      ]);
      await c.query("COMMIT");
      expect(await release).toEqual({ ok: false, reason: "lease-lost" });
      expect(early).toBe("waiting");
    });
    const after = await store.getRun(run.id);
    expect(after).toMatchObject({ status: "running", leaseOwner: "w2", epoch: run.epoch + 1 });
    expect(after?.output).toBeNull();
  });

  it("a lone completion leaves the run as release_runs leaves it, a cancel asked meanwhile too", async () => {
    const store = await openStore();
    const hints: StoreHint[] = [];
    let heard: (() => void) | undefined;
    const listening = new Promise<void>((resolve) => {
      heard = resolve;
    });
    store.subscribe((h) => {
      hints.push(h);
      heard?.();
    });
    // The first hint is the one the LISTEN connection gives once it listens: a hint sent
    // before would be lost (hints are only hints).
    await listening;
    const a = await claimedRun(store, "run_a");
    await store.requestCancel(a.id, "stop");
    const out = await store.releaseRun({
      runId: a.id,
      epoch: a.epoch,
      status: "completed",
      output: "[1]",
      reason: "done\u0000here",
      readyAt: null,
    });
    if (!out.ok) throw new Error("lone completion lost its lease");
    const run = out.run;
    expect(run).toMatchObject({
      status: "completed",
      output: "[1]",
      reason: "done\\u0000here",
      error: null,
      readyAt: null,
      wakeAt: null,
      waitingFor: [],
      leaseOwner: null,
      leaseUntil: null,
      heldBy: null,
      heldUntil: null,
      failedCalls: [],
      cancelRequested: true,
    });
    // The run as stored but its input, which a release does not send back (ReleasedRun).
    const { input: _, ...stored } = (await store.getRun(a.id))!;
    expect(stored).toEqual(run);
    while (!hints.some((h) => h.kind === "finished")) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(hints).toContainEqual({ kind: "finished", runId: a.id });
  });

  it("a lone completion whose commit's answer was lost is retried, and finds its own release", async () => {
    const store = await openStore();
    const run = await claimedRun(store, "run_lost");
    seen.lose.add("cairn_complete_run");
    const out = await store.releaseRun({
      runId: run.id,
      epoch: run.epoch,
      status: "completed",
      output: "7",
      readyAt: null,
    });
    expect(seen.lose.size).toBe(0);
    expect(out.ok && out.run.status).toBe("completed");
    expect(out.ok && out.run.output).toBe("7");
  });

  it("a lone create whose commit's answer was lost is retried, and answers the run it made", async () => {
    const store = await openStore();
    seen.lose.add("cairn_create_run");
    const made = await store.createRun({
      id: "run_made",
      workflow: "alpha",
      version: "1",
      input: "{}",
      budgetLimit: { usd: 2 },
      claimBy: { workerId: "w1", leaseMs: 60_000 },
    });
    expect(seen.lose.size).toBe(0);
    expect(made.created).toBe(true);
    expect(made.run).toMatchObject({ status: "running", leaseOwner: "w1", epoch: 1 });
    expect(made.run.budgetLimit).toEqual({ usd: 2 });
  });
});
