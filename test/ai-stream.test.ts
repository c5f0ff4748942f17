// cairn/ai streams: a streamed model call forwards its parts to the run's stream, which
// any process reads while the run is live, resumes from an offset, and which shows a call
// cut by a crash streaming again under its next attempt; the step's record stays the
// call's one final result.

import { describe, expect, it } from "vitest";
import type { RunStreamChunk } from "../src/ai/index.js";
import type { Store } from "../src/index.js";
import { type AgentOutput, agentModel, agentWorkflow } from "./fixtures/ai-agent.js";
import { kitFor, memoryDeps } from "./helpers/ai.js";
import { crashableEngine } from "./helpers/crash.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** Reads `iter` into `into` in the background; resolves when it ends. */
function collect(iter: AsyncIterable<RunStreamChunk>, into: RunStreamChunk[]): Promise<void> {
  const reading = (async () => {
    for await (const c of iter) into.push(c);
  })();
  reading.catch(() => {}); // awaited by the test; a failed test must not leave it unheard
  return reading;
}

const textOf = (chunks: RunStreamChunk[], call: string, attempt: number) =>
  chunks
    .filter((c) => c.call === call && c.attempt === attempt && c.part.type === "text-delta")
    .map((c) => (c.part as { delta: string }).delta)
    .join("");

describe.each(BACKENDS)("run streams (%s)", (backend) => {
  const harness = useHarness(backend);

  it("another process reads a call's parts while the run is live, and resumes from an offset", async () => {
    const h = harness();
    const deps = memoryDeps();
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    // The third call (the answer) holds its stream open after two words.
    const model = agentModel({
      deps,
      streamPart: async (part, i, call) => {
        if (call === 3 && part.type === "text-delta" && i > 3) await gate;
      },
    });
    const wf = agentWorkflow(kitFor(h), model, deps, { stream: true });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, { topic: "streams" });

    const reader = kitFor(h); // another connection: what another process has
    const live: RunStreamChunk[] = [];
    const reading = collect(reader.readStream(run.id, { pollMs: 10 }), live);
    // Deltas that arrive while an append is in flight are joined: wait for the words.
    const answerText = () => {
      const call = live.find((c) => c.part.type === "text-delta")?.call;
      return call ? textOf(live, call, 1) : "";
    };
    await until(() => answerText() === "Done with ", "the answer's first words on the stream");
    expect((await run.info())?.status).toBe("running");
    const answerCall = live.find((c) => c.part.type === "text-delta")!.call;
    expect(textOf(live, answerCall, 1)).toBe("Done with ");

    // A reader that stopped at some offset resumes after it and misses nothing.
    const cut = live.at(-1)!.offset;
    const resumed: RunStreamChunk[] = [];
    const resuming = collect(reader.readStream(run.id, { from: cut + 1, pollMs: 10 }), resumed);
    release();
    const out = (await run.result()) as AgentOutput;
    await Promise.all([reading, resuming]);
    expect(resumed.length).toBeGreaterThan(0);
    expect(resumed).toEqual(live.slice(cut + 1));
    expect(live.map((c) => c.offset)).toEqual(live.map((_, i) => i));

    // Everything streamed: three calls, each in one attempt; the answer is the output.
    const calls = [...new Set(live.map((c) => c.call))];
    expect(calls.length).toBe(3);
    expect(live.every((c) => c.attempt === 1 && c.name === "model:mock-model-id")).toBe(true);
    expect(textOf(live, answerCall, 1)).toBe(out.text);
    const toolCalls = live.filter((c) => c.part.type === "tool-call").map((c) => c.part);
    expect(toolCalls.map((p) => (p as { toolName: string }).toolName)).toEqual([
      "search",
      "fetchPage",
      "calculate",
      "writeNote",
      "openPullRequest",
    ]);
    // The record is the final result, deltas joined: one text-delta for the whole answer.
    const answer = (await engine.getSteps(run.id)).find((s) => s.key === "model:mock-model-id#3");
    const parts = (answer!.result as { parts: Array<{ type: string; delta?: string }> }).parts;
    expect(parts.filter((p) => p.type === "text-delta").map((p) => p.delta)).toEqual([out.text]);
    // A read of a finished run returns everything there is and ends.
    const again: RunStreamChunk[] = [];
    await collect(reader.readStream(run.id, { follow: false }), again);
    expect(again).toEqual(live);
  });

  it("a call cut by a crash streams again under its next attempt; the record is the final result", async () => {
    const h = harness();
    const deps = memoryDeps();
    // Provider call 3 (the answer, in the first worker) hangs after two words, forever.
    // Provider call 4 is the answer's attempt 2, in the second worker: from then on the clock
    // stays put. Moved on a second per step while attempt 2 streamed, it ran past the 5 s the
    // answered call waits for its stream's last append (side-work.ts), and a loaded CI's slow
    // append was given up on: no chunk of attempt 2 on the stream (1 CI in 4 on PostgreSQL).
    let moving = true;
    const model = agentModel({
      deps,
      before: (n) => {
        if (n === 4) moving = false;
      },
      streamPart: async (part, i, call) => {
        if (call === 3 && part.type === "text-delta" && i > 3) await new Promise(() => {});
      },
    });
    const first = crashableEngine(h, [agentWorkflow(kitFor(h), model, deps, { stream: true })]);
    // The second worker's kit store answers an append only once the clock stays put: a store
    // slower than the clock's steps, as a loaded CI's PostgreSQL was (moving the clock on
    // while attempt 2 streams fails the test every time, not once in four CIs).
    let steady!: () => void;
    const steadied = new Promise<void>((r) => {
      steady = r;
    });
    const inner = h.store();
    const slow = new Proxy(inner, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function") return value;
        if (prop !== "appendStream") return value.bind(target);
        return async (p: Parameters<Store["appendStream"]>[0]) => {
          if (moving) await steadied;
          return target.appendStream(p);
        };
      },
    });
    const wf = agentWorkflow(kitFor(h, { store: slow }), model, deps, { stream: true });
    const run = await first.engine.start(wf, { topic: "crash" });
    const reader = kitFor(h);
    const seen: RunStreamChunk[] = [];
    const reading = collect(reader.readStream(run.id, { pollMs: 10 }), seen);
    await until(() => {
      const call = seen.find((c) => c.part.type === "text-delta")?.call;
      return call ? textOf(seen, call, 1) === "Done with " : false;
    }, "the answer's first words");
    first.crash();
    // The first worker's lease (30 s) expires as the clock moves; the second's outlasts the
    // clock's jumps, so nothing but the crash hands the run over.
    const second = h.engine([wf], { leaseMs: 600_000 });
    const result = second.handle(run.id).result();
    for (let i = 0; i < 1_000 && moving; i++) {
      await h.clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 2));
    }
    steady();
    const out = (await result) as AgentOutput;
    await reading;

    const answerCall = seen.find((c) => c.part.type === "text-delta")!.call;
    expect(textOf(seen, answerCall, 1)).toBe("Done with ");
    // The new worker recorded the cut attempt 1 as WORKER_LOST; attempt 2 streamed it all.
    expect(textOf(seen, answerCall, 2)).toBe(out.text);
    expect(new Set(seen.filter((c) => c.call === answerCall).map((c) => c.attempt))).toEqual(
      new Set([1, 2]),
    );
    const steps = await second.getSteps(run.id);
    const answer = steps.find((s) => s.key === "model:mock-model-id#3")!;
    expect(answer.attempts.map((a) => a.error?.code ?? "ok")).toEqual(["WORKER_LOST", "ok"]);
    expect(deps.count("model")).toBe(4);
    for (const t of ["search", "fetchPage", "calculate", "writeNote", "openPullRequest"]) {
      expect(deps.count(`tool ${t}`), t).toBe(1);
    }
  });
});
