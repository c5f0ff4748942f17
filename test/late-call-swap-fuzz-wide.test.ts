// A wider fuzz of reused late names than late-call-swap-fuzz: besides steps, reads,
// timers and helpers, branches race a call of the name against a timer (the loser's outcome
// comes later), chain a call onto a step with .then, set up a timer early whose callback makes
// the call, yield through setImmediate, and fire a call without awaiting it until the branch
// ends, or join a step with a file read ("mixed": seed 43 found replay-held-delivery-swap-findings). Timings differ
// between the first execution and the replay (CAIRN_WIDE_SWAP_FUZZ_SEEDS, CAIRN_WIDE_SWAP_FUZZ_BACKEND). A run
// the first execution accepts must hand each call of the name its own value on the replay;
// refusals are fine. Triage knobs (below): _BASE, _REPEAT, _EXCLUDE, and _CALL=effect|wait,
// which reuses the name on effects or waits (the wait variant found
// test/replay-held-delivery-swap-wait-findings.test.ts).

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { RunConflictError, realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, programStorage } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const readSelf = () => readFile(new URL(import.meta.url), "utf8");
const immediate = () => new Promise((r) => setImmediate(r));
/** A soak, run on demand (CAIRN_WIDE_SWAP_FUZZ_SEEDS=150): slow, so not part of the default run.
 *  Its "mixed" op swapped (seed 43) until replay-held-delivery-swap-findings was mended. */
const SEEDS = Number(process.env.CAIRN_WIDE_SWAP_FUZZ_SEEDS ?? 0);
/** CAIRN_WIDE_SWAP_FUZZ_BASE=<n>: programs n+1 .. n+SEEDS instead of 1 .. SEEDS (fresh shapes). */
const BASE = Number(process.env.CAIRN_WIDE_SWAP_FUZZ_BASE ?? 0);
/** CAIRN_WIDE_SWAP_FUZZ_REPEAT=<n>: each program n times (a swap's timing is the replay's own). */
const REPEAT = Number(process.env.CAIRN_WIDE_SWAP_FUZZ_REPEAT ?? 1);
/** CAIRN_WIDE_SWAP_FUZZ_EXCLUDE=mixed,read: ops left out (triage: is a swap the known one?). */
const EXCLUDE = (process.env.CAIRN_WIDE_SWAP_FUZZ_EXCLUDE ?? "").split(",").filter(Boolean);
/** CAIRN_WIDE_SWAP_FUZZ_CALL=effect|wait: the reused name is a ctx.effect or a
 *  ctx.waitForEvent (one event sent per call) instead of a ctx.step. */
const CALL = process.env.CAIRN_WIDE_SWAP_FUZZ_CALL ?? "step";
/** CAIRN_WIDE_SWAP_FUZZ_ONLY=5130012,5130040: just these programs (each _REPEAT times), e.g.
 *  seeds a soak's report listed as accepted. */
const ONLY_SEEDS = (process.env.CAIRN_WIDE_SWAP_FUZZ_ONLY ?? "")
  .split(",")
  .filter(Boolean)
  .map(Number);
const SEED_LIST =
  ONLY_SEEDS.length > 0 ? ONLY_SEEDS : Array.from({ length: SEEDS }, (_, i) => BASE + 1 + i);

type Op =
  | "step"
  | "read"
  | "timer"
  | "x"
  | "helper"
  | "race"
  | "then"
  | "early"
  | "imm"
  | "fire"
  | "mixed";

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
  const ops: Op[] = [
    "step",
    "read",
    "timer",
    "x",
    "helper",
    "race",
    "then",
    "early",
    "imm",
    "fire",
    "mixed",
  ];
  const kept = ops.filter((op) => !EXCLUDE.includes(op));
  return Array.from({ length: 2 + Math.floor(r() * 2) }, () =>
    Array.from({ length: 2 + Math.floor(r() * 4) }, () => kept[Math.floor(r() * kept.length)]!),
  );
}

const ONLY = process.env.CAIRN_WIDE_SWAP_FUZZ_BACKEND;
describe.each(BACKENDS.filter((b) => !ONLY || b === ONLY))("%s: wider swap fuzz", (backend) => {
  it.skipIf(SEED_LIST.length === 0)(
    "accepted runs replay every call of the reused name with its own value",
    async () => {
      let accepted = 0;
      let replayRefused = 0;
      const failures: string[] = [];
      const refusedBy: Record<string, number> = {};
      const acceptedSeeds = new Set<number>();
      const refusedSeeds: string[] = [];
      for (let k = 0; k < SEED_LIST.length * REPEAT; k++) {
        const seed = SEED_LIST[k % SEED_LIST.length] as number;
        const branches = program(seed);
        const h = programStorage(backend);
        try {
          const swaps: string[] = [];
          const firstSeen = new Map<string, string>();
          let scale = 1;
          const jitter = () => Math.floor(Math.random() * 12 * scale);
          const wf = workflow(
            { name: `wide-fuzz-${seed}`, version: "1" },
            async (ctx: WorkflowContext) => {
              const x = async (id: string) => {
                const body = () => delay(jitter()).then(() => id);
                if (CALL === "wait") {
                  // Events have no id: each call of the name must get the event it got first.
                  const got = await ctx.waitForEvent("x");
                  const v = got.timedOut ? "timed out" : String(got.payload);
                  const first = firstSeen.get(id);
                  if (first === undefined) firstSeen.set(id, v);
                  else if (first !== v) swaps.push(`${id} got ${v}, first ${first}`);
                  return v;
                }
                const v =
                  CALL === "effect"
                    ? await ctx.effect("x", { perform: body, reconcile: () => undefined })
                    : await ctx.step("x", body);
                if (v !== id) swaps.push(`${id} got ${v}`);
                return v;
              };
              await Promise.all(
                branches.map(async (ops, b) => {
                  const pending: Promise<unknown>[] = [];
                  // Marked handled when made: a branch a refusal stops early never reaches the
                  // join, and its calls' rejections (HaltedSignal) would go unhandled.
                  const track = (p: Promise<unknown>) => {
                    p.catch(() => {});
                    pending.push(p);
                  };
                  for (const [i, op] of ops.entries()) {
                    const id = `b${b}.${i}`;
                    if (op === "step")
                      await ctx.step(`s:${id}`, () => delay(jitter()).then(() => id));
                    else if (op === "read") await readSelf();
                    else if (op === "timer") await delay(jitter());
                    else if (op === "imm") await immediate();
                    else if (op === "x") await x(id);
                    else if (op === "race") {
                      const call = x(id);
                      track(call);
                      await Promise.race([call, delay(jitter())]);
                    } else if (op === "then")
                      await ctx
                        .step(`t:${id}`, () => delay(jitter()).then(() => id))
                        .then(() => x(id));
                    else if (op === "early") track(delay(jitter()).then(() => x(id)));
                    else if (op === "fire") track(x(id));
                    else if (op === "mixed") {
                      // Runs on in the step's cascade when the read was done first, else late.
                      await Promise.all([
                        ctx.step(`m:${id}`, () => delay(jitter()).then(() => id)),
                        readSelf(),
                      ]);
                      await x(id);
                    } else {
                      const helper = async () => {
                        await readSelf();
                        await delay(jitter());
                        return x(id);
                      };
                      await helper();
                    }
                  }
                  await Promise.all(pending);
                }),
              );
              await ctx.waitForEvent("go");
              return "done";
            },
          );
          const e = h.engine([wf], { clock: realClock });
          const run = await e.start(wf, undefined);
          if (CALL === "wait") {
            const calls = branches
              .flat()
              .filter((op) => !["step", "read", "timer", "imm"].includes(op));
            // A first run refused before all are sent is finished: its events are refused too.
            for (let k = 0; k < calls.length; k++) {
              const sent = await e.sendEvent(run.id, "x", `e${k}`).catch((err: Error) => err);
              if (sent instanceof RunConflictError) break;
              if (sent instanceof Error) throw sent;
            }
          }
          // Waiting for "go" alone: a run of waits also waits (for "x") until its events are
          // consumed, and the execution that takes them then is a first one, not a replay.
          await until(async () => {
            const view = await e.getRun(run.id);
            if (view?.status === "failed") return true;
            return view?.status === "waiting" && view.waitingFor?.join() === "go";
          }, "the run waits for go or is refused");
          if ((await e.getRun(run.id))?.status === "failed") {
            const why = await run.result().catch((err: Error) => err.name);
            refusedBy[why] = (refusedBy[why] ?? 0) + 1;
            await e.close();
            continue;
          }
          accepted++;
          acceptedSeeds.add(seed);
          scale = Math.random() < 0.5 ? 0 : 3;
          await e.sendEvent(run.id, "go");
          const out = await run.result().catch((err: Error) => err.name);
          // Collected, not thrown: a soak reports every failing seed, not just the first.
          if (swaps.length > 0)
            failures.push(`seed ${seed} (${branches.join(" | ")}): ${swaps.join(", ")}`);
          if (!["done", "NonDeterminismError"].includes(out)) failures.push(`seed ${seed}: ${out}`);
          if (out !== "done") {
            replayRefused++;
            refusedSeeds.push(`${seed} (${out})`);
          }
          await e.close();
        } catch (err) {
          // Whatever broke (a run that never reached "go", a store error), the seed is named.
          failures.push(
            `seed ${seed} (${branches.join(" | ")}): ${String((err as Error)?.stack ?? err)}`,
          );
        } finally {
          await h.release();
        }
      }
      console.log(
        `${backend}: ${accepted} of ${SEED_LIST.length * REPEAT} accepted (first runs refused: ${JSON.stringify(refusedBy)}), ${replayRefused} replays refused${refusedSeeds.length > 0 ? ` (seeds ${refusedSeeds.join(", ")})` : ""}; accepted seeds ${[...acceptedSeeds].join(",")}`,
      );
      expect(failures).toEqual([]);
    },
    900_000,
  );
});
