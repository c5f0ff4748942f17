// Engines on a fresh store of either backend (a temp SQLite file, or an empty Postgres
// schema of its own: perhaps one an earlier test of the file used, emptied) with a virtual
// clock; everything is closed and removed after each test. Suites that must hold on both
// backends run once per entry of BACKENDS.

import { afterEach } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  type EngineOptions,
  type Store,
  sqliteStore,
} from "../../src/index.js";
import { postgresStore } from "../../src/store/postgres/postgres-store.js";
import { createVirtualClock, type VirtualClock } from "../../src/testing/index.js";
import { postgresTestUrl } from "./postgres.js";
import { reusableSchema } from "./postgres-reuse.js";
import { tempDbPath } from "./sqlite.js";

export type Backend = "sqlite" | "postgres";

/** The backends available here: Postgres joins when it accepts connections (under CI it
 *  must: postgresTestUrl throws there when it cannot connect). */
export const pgUrl = await postgresTestUrl();
export const BACKENDS: Backend[] = pgUrl ? ["sqlite", "postgres"] : ["sqlite"];

export interface Harness {
  backend: Backend;
  clock: VirtualClock;
  /** A new Store on the same storage (another connection, as another process has). */
  store(): Store;
  /** A new engine on the same storage (a restarted worker). */
  engine(workflows: AnyWorkflow[], opts?: EngineOptions): Engine;
  /** Runs `fn` after the test (the file, for a shared harness), before the storage is
   *  removed and in reverse order of the cleanups asked for (an engine is closed before the
   *  storage it uses goes). */
  onCleanup?(fn: () => Promise<void> | void): void;
}

/** New Stores on fresh storage of `backend` (each call of the result: another connection to
 *  the same storage); the storage's removal is pushed onto `cleanups`, which the caller
 *  runs after the engines on it have closed. */
export function freshStorage(
  backend: Backend,
  cleanups: Array<() => Promise<void> | void>,
): () => Store {
  if (backend === "sqlite") {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    return () => sqliteStore(db.path);
  }
  const url = pgUrl;
  if (!url) throw new Error("postgres storage without a database");
  // A migrated schema the file's earlier tests used, emptied (helpers/postgres-reuse.ts).
  const reused = reusableSchema(url);
  cleanups.push(reused.release);
  return () => postgresStore(reused.url, { schema: reused.schema });
}

/** Fresh storage for one program of a fuzz, released as soon as the program is done (its
 *  engines closed, then its storage): on PostgreSQL the schema is emptied and the next
 *  program takes it (helpers/postgres-reuse.ts), so a soak of 240 programs uses one schema,
 *  not 240 left for the file's end to drop, and no engine of a finished program polls on. */
export function programStorage(backend: Backend) {
  const cleanups: Array<() => Promise<void> | void> = [];
  const store = freshStorage(backend, cleanups);
  return {
    engine(workflows: AnyWorkflow[], opts: EngineOptions): Engine {
      const e = createEngine({ store: store(), workflows, pollIntervalMs: 10, ...opts });
      cleanups.push(() => e.close());
      return e;
    },
    async release(): Promise<void> {
      for (const c of cleanups.splice(0).reverse()) await c();
    },
  };
}

export function useHarness(backend: Backend): () => Harness {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  return () => {
    const clock = createVirtualClock();
    const store = freshStorage(backend, cleanups);
    return {
      backend,
      clock,
      store,
      engine(workflows, opts = {}) {
        const e = createEngine({ store: store(), workflows, clock, pollIntervalMs: 10, ...opts });
        cleanups.push(() => e.close());
        return e;
      },
      onCleanup: (fn) => cleanups.push(fn),
    };
  };
}

/** Advances the virtual clock in steps until `done` settles (bounded by `maxSteps`). */
export async function advanceUntil<T>(
  clock: VirtualClock,
  done: Promise<T>,
  stepMs: number,
  maxSteps = 1000,
): Promise<T> {
  let settled = false;
  const p = done.finally(() => {
    settled = true;
  });
  p.catch(() => {}); // observed by the caller; avoid an unhandled rejection mid-loop
  for (let i = 0; i < maxSteps && !settled; i++) {
    await clock.advance(stepMs);
    await new Promise((r) => setTimeout(r, 2));
  }
  return p;
}
