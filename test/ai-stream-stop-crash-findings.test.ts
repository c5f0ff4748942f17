// The record of a streamed loop's stop (src/ai/stream-stop.ts), with the first execution's
// worker dying around it: the stop recorded, the replay stops there; the worker dead as the
// stop's record is written (it never lands), the stop died with it, and the replay goes on
// as one whose stop never came. Neither replay is refused.

import { stepCountIs, streamText, tool } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createEngine, type Store, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { kitFor } from "./helpers/ai.js";
import { oneToolModel, settle } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** `store`, which stops answering for good (a dead worker) once `dies(names)` says so for a
 *  write holding steps of those names; `onWrite` is called as each such write is sent. */
function mortalStore(
  store: Store,
  onWrite: (names: string[]) => "die" | undefined,
): { store: Store; dead: () => boolean } {
  let dead = false;
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== "function") return v;
      return (...args: unknown[]) => {
        if (dead) return new Promise(() => {});
        if (prop === "appendRecords") {
          const writes = args[0] as Parameters<Store["appendRecords"]>[0];
          const names = writes.flatMap((w) => w.steps?.map((s) => s.name) ?? []);
          if (onWrite(names) === "die") {
            dead = true;
            return new Promise(() => {});
          }
        }
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: proxy, dead: () => dead };
}

let unique = 0;

for (const backend of BACKENDS) {
  describe(`a streamed loop's stop and a crash (${backend})`, () => {
    const harness = useHarness(backend);

    /** The stop lands as the tool's record is written; the worker dies at the write
     *  holding a step whose name starts with `dieAt`. */
    async function crashAt(dieAt: string) {
      const h = harness();
      const { model, calls } = oneToolModel();
      const ai = kitFor(h);
      const outcomes: string[] = [];
      let caller = new AbortController();
      let armed = true;
      const wf = workflow({ name: `stream-crash-${++unique}`, version: "1" }, async (ctx) => {
        caller = new AbortController();
        const tools = ai.tools(ctx, {
          lookup: tool({ inputSchema: z.object({}), execute: async () => "found" }),
        });
        let first: string;
        try {
          const text = await streamText({
            model: ai.model(ctx, model),
            tools,
            prompt: "go",
            abortSignal: caller.signal,
            stopWhen: stepCountIs(3),
            onError: () => {},
          }).text;
          first = `answered: ${text}`;
        } catch (err) {
          first = `stopped: ${(err as Error).name}`;
        }
        const n = await ctx.step("between", async () => 7);
        await ctx.step("after", async () => 8); // issued once "between" (and the stop) is durable
        outcomes.push(`${first} / ${n}`);
        await ctx.waitForEvent("go-on");
        return outcomes.at(-1);
      });
      const inner = h.store();
      const mortal = mortalStore(inner, (names) => {
        if (armed && names.some((n) => n.startsWith("tool:"))) {
          armed = false;
          caller.abort(); // the user's stop, as the tool's record is written
        }
        return names.some((n) => n.startsWith(dieAt)) ? "die" : undefined;
      });
      const first = createEngine({
        store: mortal.store,
        workflows: [wf],
        clock: h.clock,
        pollIntervalMs: 10,
        closeGraceMs: 50,
      });
      try {
        const run = await first.start(wf, null);
        await until(mortal.dead, "the first worker died");
        await h.clock.advance(60_000); // its lease runs out
        const replay = h.engine([wf]);
        await advanceUntil(h.clock, waitForStatus(replay.handle(run.id), "waiting"), 1_000, 100);
        await replay.sendEvent(run.id, "go-on", null);
        const r = await advanceUntil(h.clock, settle(replay.handle(run.id).result()), 1_000, 100);
        return { outcomes, r, calls: calls() };
      } finally {
        await inner.close().catch(() => {});
      }
    }

    it("dead as the stop's own record is written: the replay goes on, as if no stop came", async () => {
      const x = await crashAt("%25stop:");
      expect(x.r.error).toBeUndefined();
      expect(x.r.value).toBe("answered: the answer / 7");
      expect(x.calls).toBe(2); // the loop's next call, made by the replay
    });

    it("dead after the stop's record, at the workflow's next write: the replay stops there", async () => {
      const x = await crashAt("after");
      expect(x.r.error).toBeUndefined();
      expect(x.r.value).toBe("stopped: AbortError / 7");
      expect(x.calls).toBe(1);
    });
  });
}
