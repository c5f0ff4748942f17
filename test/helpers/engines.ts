// Engines on temp SQLite files with a virtual clock, closed and removed after each test.

import { afterEach } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  type EngineOptions,
  sqliteStore,
} from "../../src/index.js";
import { createVirtualClock, type VirtualClock } from "../../src/testing/index.js";
import { tempDbPath } from "./sqlite.js";

export interface Harness {
  path: string;
  clock: VirtualClock;
  /** A new engine on the same database (a restarted worker). */
  engine(workflows: AnyWorkflow[], opts?: EngineOptions): Engine;
}

export function useHarness(): () => Harness {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  return () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const clock = createVirtualClock();
    return {
      path: db.path,
      clock,
      engine(workflows, opts = {}) {
        const e = createEngine({
          store: sqliteStore(db.path),
          workflows,
          clock,
          pollIntervalMs: 10,
          ...opts,
        });
        cleanups.push(() => e.close());
        return e;
      },
    };
  };
}

/** Advances the virtual clock in steps until `done` resolves (bounded by `maxSteps`). */
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
