// The crash sweep's default mode: every execution runs in this process on fresh storage,
// and a crash is the first engine's store going dead (crashable-store.ts), or the engine
// dying right before a step's function; a new engine takes the run over after the lease.
// Fast: a dozen boundaries in well under a second.

import type { Boundary } from "./crash-boundaries.js";
import type { CrashSweepOptions, SweepMode, SweepOutcome } from "./crash-sweep.js";
import { outcomeOf, settleFailed } from "./crash-sweep-outcome.js";
import { crashPoint, noteBoundaries } from "./crash-sweep-points.js";
import { createSideEffectCounter, type SideEffectCounter } from "./side-effects.js";
import { openTestEngine, type TestEngine, type TestEngineInternals } from "./test-engine.js";

const never = () => new Promise<never>(() => {});

export function inProcessMode<I>(options: CrashSweepOptions<I>, runId: string): SweepMode {
  const sideEffects = options.sideEffects ?? createSideEffectCounter();
  return {
    async baseline() {
      const seen = new Map<string, Boundary>();
      const outcome = await execute(options, sideEffects, runId, noteBoundaries(seen));
      return { outcome, boundaries: [...seen.values()] };
    },
    async crashAt(boundary, ordinal, known) {
      let engine: TestEngine | undefined;
      const point = crashPoint(boundary, ordinal, known, (site) => {
        // What the dead engine's code does from here on is not counted.
        sideEffects.paused = true;
        if (site !== "function") return;
        engine?.crash();
        return never();
      });
      const outcome = await execute(
        options,
        sideEffects,
        runId,
        point.internals,
        (t) => {
          engine = t;
        },
        () => point.fired,
      );
      return { outcome, actual: point.actual, crashed: point.fired };
    },
    async close() {},
  };
}

/** One execution on fresh storage; with `crashed()`, a new engine takes over after the
 *  first one crashed. */
async function execute<I>(
  options: CrashSweepOptions<I>,
  sideEffects: SideEffectCounter,
  runId: string,
  internals: TestEngineInternals,
  onEngine?: (t: TestEngine) => void,
  crashed?: () => boolean,
): Promise<SweepOutcome> {
  const storage = options.storage?.();
  sideEffects.reset();
  sideEffects.paused = false;
  await options.reset?.();
  const t = openTestEngine(
    {
      workflows: options.workflows,
      faults: options.faults,
      sideEffects,
      store: storage?.store,
      engineOptions: options.engineOptions,
      maxIdleWakes: options.maxIdleWakes,
    },
    internals,
  );
  onEngine?.(t);
  try {
    await t.start(options.workflow, options.input, { id: runId });
    // With a crash point: when the first engine has crashed (it may also finish without
    // crossing the point, e.g. a timing-dependent one), a new engine takes over after the
    // lease and finishes the run.
    let recovered = false;
    const view = await t.settle(runId, {
      events: options.events,
      beforeTick: async () => {
        if (crashed?.() && !recovered) {
          recovered = true;
          t.crash();
          await t.recover();
        }
      },
    });
    return { ...outcomeOf(view), sideEffects: sideEffects.counts() };
  } catch (err) {
    return { ...settleFailed(err), sideEffects: sideEffects.counts() };
  } finally {
    await t.close();
    await storage?.cleanup();
  }
}
