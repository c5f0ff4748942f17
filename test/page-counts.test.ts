// A count a page verb takes (listRuns', claimRuns', listChildrenOfCanceled's and readStream's
// limit; claimRuns' leaseMs; readStream's from) that is not a finite number is refused on
// both backends by one StoreError naming the verb and the field (verb-arguments.ts,
// countProblem). Before: NaN, Infinity and 2^64 failed with SQLite's "datatype mismatch" or
// PostgreSQL's "invalid input syntax for type bigint" / "out of range", -Infinity listed
// none, a string or null was a number to one backend. A finite count is bound alike by both
// (pageCount): floored, below 0 as 0, above MAX_SAFE_INTEGER as that (2^64 lists every run).

import { afterEach, describe, expect, it } from "vitest";
import { StoreError, sqliteStore } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { Store } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const BACKENDS = pgUrl ? (["sqlite", "postgres"] as const) : (["sqlite"] as const);

async function openStore(backend: "sqlite" | "postgres"): Promise<Store> {
  let store: Store;
  if (backend === "sqlite") {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    store = sqliteStore(db.path);
  } else {
    const { schema, drop } = testSchema(pgUrl!);
    cleanups.push(drop);
    store = postgresStore(pgUrl!, { schema });
  }
  await store.open({ clock: createVirtualClock(1_700_000_000_000) });
  cleanups.push(() => store.close());
  return store;
}

const newRun = (id: string) => ({
  id,
  workflow: "wf",
  version: "1",
  input: "null",
  budgetLimit: {},
});

const BAD: unknown[] = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, "3", null];
const shown = (v: unknown) =>
  typeof v === "number" ? String(v) : typeof v === "string" ? `the string "${v}"` : String(v);

async function refusal(p: Promise<unknown>): Promise<StoreError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreError);
  return err as StoreError;
}

describe.each(BACKENDS)("%s: counts the page verbs take", (backend) => {
  it("a count that is not a finite number is refused, naming the verb and field", async () => {
    const store = await openStore(backend);
    await store.createRun(newRun("run_a"));
    for (const bad of BAD) {
      const n = bad as number;
      const says = (verb: string, field: string) =>
        new RegExp(`^${verb}.*: ${field} is ${shown(bad)}; give a finite number`);
      for (const filter of [{}, { status: "pending" as const }, { workflow: "wf" }]) {
        expect((await refusal(store.listRuns({ ...filter, limit: n }))).message).toMatch(
          says("listRuns", "limit"),
        );
      }
      expect(
        (
          await refusal(
            store.claimRuns({ workerId: "w", workflows: ["wf@1"], limit: n, leaseMs: 1 }),
          )
        ).message,
      ).toMatch(says("claimRuns", "limit"));
      expect(
        (
          await refusal(
            store.claimRuns({ workerId: "w", workflows: ["wf@1"], limit: 1, leaseMs: n }),
          )
        ).message,
      ).toMatch(says("claimRuns", "leaseMs"));
      expect((await refusal(store.listChildrenOfCanceled!({ limit: n }))).message).toMatch(
        says("listChildrenOfCanceled", "limit"),
      );
      const stream = await refusal(store.readStream({ runId: "run_a", from: 0, limit: n }));
      expect(stream.message).toMatch(says('readStream: run "run_a"', "limit"));
      expect((await refusal(store.readStream({ runId: "run_a", from: n }))).message).toMatch(
        says('readStream: run "run_a"', "from"),
      );
    }
    // Nothing was claimed by the refused claims.
    expect((await store.getRun("run_a"))!.status).toBe("pending");
  });

  it("a finite count is bound alike: 2^64 and 2^53 list every run, fractions floored", async () => {
    const store = await openStore(backend);
    for (const id of ["run_a", "run_b", "run_c"]) await store.createRun(newRun(id));
    const every = (await store.listRuns()).map((r) => r.id);
    expect(every).toHaveLength(3);
    for (const filter of [{}, { status: "pending" as const }, { workflow: "wf" }]) {
      for (const limit of [2 ** 64, 2 ** 53, Number.MAX_VALUE]) {
        expect((await store.listRuns({ ...filter, limit })).map((r) => r.id)).toEqual(every);
      }
      expect(await store.listRuns({ ...filter, limit: -1e308 })).toEqual([]);
      expect((await store.listRuns({ ...filter, limit: 2.9 })).map((r) => r.id)).toEqual(
        every.slice(0, 2),
      );
    }
    expect(await store.listChildrenOfCanceled!({ limit: 2 ** 64 })).toEqual([]);
    expect(await store.readStream({ runId: "run_a", from: 2 ** 64, limit: 2 ** 64 })).toEqual([]);
    await store.appendStream({ runId: "run_a", chunks: ["x", "y", "z"] });
    const offsets = async (from: number, limit?: number) =>
      (await store.readStream({ runId: "run_a", from, ...(limit !== undefined && { limit }) })).map(
        (c) => c.data,
      );
    expect(await offsets(0, 2 ** 64)).toEqual(["x", "y", "z"]);
    expect(await offsets(0, 1.5)).toEqual(["x"]);
    expect(await offsets(0, -1)).toEqual([]);
    expect(await offsets(-5)).toEqual(["x", "y", "z"]);
    // A claim of 2^64 runs claims every ready one; 2.5 claims 2.
    const claimed = await store.claimRuns({
      workerId: "w",
      workflows: ["wf@1"],
      limit: 2.5,
      leaseMs: 60_000,
    });
    expect(claimed).toHaveLength(2);
    expect(
      await store.claimRuns({
        workerId: "w2",
        workflows: ["wf@1"],
        limit: 2 ** 64,
        leaseMs: 60_000,
      }),
    ).toHaveLength(1);
  });
});
