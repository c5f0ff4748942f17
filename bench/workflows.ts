// The workflow every benchmark runs: a loop of ctx.step calls returning small values,
// optionally ending in a waitForEvent (so a run can be suspended and resumed). A run may
// name a probe: its first step waits at the probe's barrier (so claims and starts stay
// outside the measured window) and every executed step stamps its start time.

import { cairn } from "./cairn.js";
import type { Barrier } from "./lib.js";

const { workflow } = cairn;

export interface Probe {
  barrier?: Barrier;
  /** performance.now() at the start of each EXECUTED step, in call order. */
  stamps?: number[];
  /** performance.now() each time an execution gets past the loop (first run and replays). */
  loopEnds?: number[];
}

const probes = new Map<string, Probe>();
let probeCount = 0;

/** Registers a probe for runs to name in their input; call the returned dispose after. */
export function addProbe(probe: Probe): { name: string; dispose: () => void } {
  probeCount += 1;
  const name = `probe-${probeCount}`;
  probes.set(name, probe);
  return { name, dispose: () => probes.delete(name) };
}

export interface LoopInput {
  steps: number;
  /** End with ctx.waitForEvent("go") and add its payload to the result. */
  wait?: boolean;
  probe?: string;
}

export const loop = workflow(
  { name: "bench-loop", version: "1" },
  async (ctx, input: LoopInput): Promise<number> => {
    let sum = 0;
    for (let i = 0; i < input.steps; i++) {
      const r = await ctx.step("s", async () => {
        const probe = input.probe === undefined ? undefined : probes.get(input.probe);
        probe?.stamps?.push(performance.now());
        if (i === 0 && probe?.barrier) await probe.barrier.arrive();
        return { i };
      });
      sum += r.i;
    }
    if (input.probe !== undefined) probes.get(input.probe)?.loopEnds?.push(performance.now());
    if (input.wait) {
      const ev = await ctx.waitForEvent<number>("go");
      if (!ev.timedOut) sum += ev.payload;
    }
    return sum;
  },
);

/** What `loop` returns for `steps` steps (and an event payload of `payload`). */
export function expectedSum(steps: number, payload = 0): number {
  return (steps * (steps - 1)) / 2 + payload;
}
