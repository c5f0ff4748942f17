// A fuzz of the late-call check's narrowing (context.ts, madeAfter): programs of concurrent
// branches that reuse one name after steps, file reads and timers of random length, run once,
// then replayed with other random timings. A run the first execution accepts must hand each
// call of the name its own recorded value on the replay (each value names the branch and
// turn that made it): a swap is the worst bug. Refusals are fine.

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, programStorage } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readSelf = () => readFile(new URL(import.meta.url), "utf8");

/** CAIRN_SWAP_FUZZ_SEEDS=200 runs more programs (soak). */
const SEEDS = Number(process.env.CAIRN_SWAP_FUZZ_SEEDS ?? 16);

type Op = "step" | "read" | "timer" | "x" | "helper";

/** A small deterministic generator (mulberry32), so a failing seed can be rerun. */
function rng(seed: number) {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function program(seed: number): Op[][] {
  const r = rng(seed);
  const ops: Op[] = ["step", "read", "timer", "x", "helper"];
  return Array.from({ length: 2 + Math.floor(r() * 2) }, () =>
    Array.from({ length: 2 + Math.floor(r() * 4) }, () => ops[Math.floor(r() * ops.length)]!),
  );
}

// The backends' fuzzes run side by side (they share nothing; their timings are random anyway).
describe.each(BACKENDS)("%s: no swapped late calls", { concurrent: true }, (backend) => {
  it("accepted runs replay every call of the reused name with its own value", async () => {
    let accepted = 0;
    let replayRefused = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      // Each program's engine and storage are released once it is done (the next program
      // takes its PostgreSQL schema, emptied); not left polling until the test ends.
      const h = programStorage(backend);
      try {
        const swaps: string[] = [];
        const jitter = () => Math.floor(Math.random() * 12);
        const branches = program(seed);
        const wf = workflow(
          { name: `swap-fuzz-${seed}`, version: "1" },
          async (ctx: WorkflowContext) => {
            const x = async (id: string) => {
              const v = await ctx.step("x", () => delay(jitter()).then(() => id));
              if (v !== id) swaps.push(`${id} got ${v}`);
            };
            await Promise.all(
              branches.map(async (ops, b) => {
                for (const [i, op] of ops.entries()) {
                  const id = `b${b}.${i}`;
                  if (op === "step")
                    await ctx.step(`s:${id}`, () => delay(jitter()).then(() => id));
                  else if (op === "read") await readSelf();
                  else if (op === "timer") await delay(jitter());
                  else if (op === "x") await x(id);
                  else {
                    const helper = async () => {
                      await readSelf();
                      await delay(jitter());
                      return x(id);
                    };
                    await helper();
                  }
                }
              }),
            );
            await ctx.waitForEvent("go");
            return "done";
          },
        );
        const e = h.engine([wf], { clock: realClock });
        const run = await e.start(wf, undefined);
        await until(
          async () => ["waiting", "failed"].includes((await e.getRun(run.id))?.status ?? ""),
          "the run waits or is refused",
        );
        if ((await e.getRun(run.id))?.status === "failed") continue;
        accepted++;
        await e.sendEvent(run.id, "go");
        const out = await run.result().catch((err: Error) => err.name);
        // A replay may refuse (its own timing), never hand a call another's value.
        expect([seed, swaps]).toEqual([seed, []]);
        expect(["done", "NonDeterminismError"]).toContain(out);
        if (out !== "done") replayRefused++;
      } finally {
        await h.release();
      }
    }
    console.log(`${backend}: ${accepted} of ${SEEDS} accepted, ${replayRefused} replays refused`);
  });
});
