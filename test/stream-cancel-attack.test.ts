// Attack on the refusal of appends once a run has finished: a run whose four model calls
// stream in parallel is canceled while they stream. The calls' remaining parts are refused
// by the store; the run ends canceled, the cancel does not wait on the streams, each call
// logs its dropped parts once (not once per part), nothing is stored after the run's
// finished status (a follower sees every chunk stored) and no rejection goes unhandled.
// Then hostile parts (NUL, lone surrogates, a cut emoji, 1 MiB) stored, and refused after
// the finish with the writer's error. Both held when written (no mend here).

import { streamText } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import type { RunStreamChunk } from "../src/ai/index.js";
import { RunStreamWriter } from "../src/ai/run-stream.js";
import { workflow } from "../src/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { claimedRun } from "./helpers/plain-records.js";
import { until } from "./helpers/sqlite.js";

type StreamPart =
  Awaited<ReturnType<MockLanguageModelV4["doStream"]>>["stream"] extends ReadableStream<infer P>
    ? P
    : never;

/** A stream of `n` deltas, one every real millisecond, then its finish. */
function slowStream(n: number): ReadableStream<StreamPart> {
  let i = 0;
  return new ReadableStream<StreamPart>({
    async start(c) {
      c.enqueue({ type: "stream-start", warnings: [] });
      c.enqueue({ type: "text-start", id: "t" });
    },
    async pull(c) {
      await new Promise((r) => setTimeout(r, 1));
      if (i++ < n) c.enqueue({ type: "text-delta", id: "t", delta: `${i} ` });
      else {
        c.enqueue({ type: "text-end", id: "t" });
        c.enqueue({
          type: "finish",
          finishReason: { unified: "stop", raw: undefined },
          usage: USAGE,
        });
        c.close();
      }
    },
  });
}

describe.each(BACKENDS)("cancel while four calls stream (%s)", (backend) => {
  const harness = useHarness(backend);

  it("ends canceled; dropped parts logged once per call; every stored chunk was followed", async () => {
    const h = harness();
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    h.onCleanup?.(() => {
      process.off("unhandledRejection", onUnhandled);
    });
    const logged: string[] = [];
    const ai = kitFor(h, { log: (m, err) => logged.push(`${m} ${err ?? ""}`) });
    const model = new MockLanguageModelV4({
      doStream: async () => ({ stream: slowStream(300) }),
    });
    const wf = workflow({ name: "cancel-streams", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model, { stream: true });
      const texts = await Promise.all(
        [0, 1, 2, 3].map((i) => streamText({ model: m, prompt: `p${i}` }).text),
      );
      return texts.join("|").length;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const follower: RunStreamChunk[] = [];
    const following = (async () => {
      for await (const c of kitFor(h).readStream(run.id, { pollMs: 5 })) follower.push(c);
    })();
    await until(() => follower.length >= 8, "chunks of the calls");
    await engine.cancel(run.id, "enough");
    await expect(run.result()).rejects.toThrow();
    expect((await engine.getRun(run.id))?.status).toBe("canceled");
    await following;
    const stored: RunStreamChunk[] = [];
    for await (const c of kitFor(h).readStream(run.id, { follow: false })) stored.push(c);
    expect(stored).toEqual(follower);
    // The calls may go on streaming after the cancel; give them time to end.
    await new Promise((r) => setTimeout(r, 500));
    const after: RunStreamChunk[] = [];
    for await (const c of kitFor(h).readStream(run.id, { follow: false })) after.push(c);
    expect(after).toEqual(stored);
    const dropped = logged.filter((l) => /had finished/.test(l));
    const calls = new Set(dropped.map((l) => /call "([^"]+)" reached/.exec(l)?.[1]));
    expect(dropped.length).toBe(calls.size);
    expect(dropped.length).toBeLessThanOrEqual(4);
    console.log(
      "h10 logged",
      logged.length,
      logged.map((l) => l.slice(0, 160)),
    );
    expect(unhandled).toEqual([]);
  });
});

describe.each(BACKENDS)("hostile parts around the refusal (%s)", (backend) => {
  const harness = useHarness(backend);

  it("NUL, lone surrogates, a cut emoji and a 1 MiB delta are stored as pushed; after the finish, refused", async () => {
    const h = harness();
    const store = h.store();
    await store.open({ clock: h.clock });
    h.onCleanup?.(() => store.close());
    const { run } = await store.createRun(claimedRun("hostile"));
    const deltas = ["a\u0000b", "\ud800", "x\udfff", "🙂".slice(0, 1), "y".repeat(1 << 20)];
    const w = new RunStreamWriter(store, run.id, {
      call: "c",
      name: "model:m",
      generation: 0,
      attempt: 1,
    });
    // Each delta its own block: the writer joins deltas of one block.
    deltas.forEach((delta, i) => {
      w.push({ type: "text-delta", id: `t${i}`, delta });
    });
    await w.close();
    const stored: RunStreamChunk[] = [];
    for await (const c of kitFor(h, { store }).readStream(run.id, { follow: false }))
      stored.push(c);
    expect(stored.map((c) => (c.part as { delta: string }).delta)).toEqual(deltas);

    const out = await store.releaseRun({
      runId: run.id,
      epoch: run.epoch,
      status: "completed",
      output: "1",
      readyAt: null,
    });
    expect(out.ok).toBe(true);
    const late = new RunStreamWriter(store, run.id, {
      call: "c",
      name: "model:m",
      generation: 0,
      attempt: 2,
    });
    for (const delta of deltas) late.push({ type: "text-delta", id: "t", delta });
    await expect(late.close()).rejects.toThrow(/had finished when these parts of call "c"/);
    expect((await store.readStream({ runId: run.id, from: 0 })).length).toBe(deltas.length);
  });
});
