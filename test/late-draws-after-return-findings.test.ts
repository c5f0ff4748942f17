// ctx.now/random/uuid drawn by the workflow's own code a few reactions after its function
// returned (a `.then` it left behind that writes into the returned object). Before: such a
// value could reach the run's stored output with no record of it in the journal (record
// before resolve): a draw while finishWith awaited the earlier draws' writes was chained
// after the promise it awaited, and the run ended before its write; a draw after the run
// ended (halted, its release not yet encoded: the committer's drain, a turn of the loop)
// was handed over unrecorded while the output it went into was still to be encoded. This
// stop's cut of two hops from the end moved that window to two reactions after the return
// (it was three). Now every draw the output holds is recorded, with the same value, and
// the output handed over in-process is the stored one.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

for (const backend of BACKENDS) {
  describe(`${backend}: a draw reactions after the function returned`, () => {
    for (const [withStep, early] of [
      [false, false],
      [true, false],
      [true, true],
    ] as const) {
      it(`is in the output only when recorded (${withStep ? "after a step" : "no step: a folded start on SQLite"}${early ? ", a draw of its own pending" : ""})`, async () => {
        const storage = freshStorage(backend, cleanups);
        const wfs = Array.from({ length: 10 }, (_, hops) =>
          workflow({ name: `late-draw-${hops}`, version: "1" }, async (ctx) => {
            if (withStep) await ctx.step("s", () => 1);
            // A draw of its own just before it returns: its write is awaited at the end.
            if (early) ctx.now("early");
            const out: { t?: number; u?: string } = {};
            let p: Promise<unknown> = Promise.resolve();
            for (let i = 0; i < hops; i++) p = p.then(() => {});
            void p.then(() => {
              out.t = ctx.random();
              out.u = ctx.uuid();
            });
            return out;
          }),
        );
        const engine = createEngine({ store: storage(), workflows: wfs, pollIntervalMs: 10 });
        cleanups.push(() => engine.close());
        for (const [hops, wf] of wfs.entries()) {
          const run = await engine.start(wf, undefined);
          const handed = (await run.result()) as { t?: number; u?: string };
          const stored = (await engine.getRun(run.id))?.output as { t?: number; u?: string };
          expect([hops, handed]).toEqual([hops, stored]);
          const steps = await engine.getSteps(run.id);
          const recorded = (key: string) => steps.find((s) => s.key === key)?.result;
          if (stored.t !== undefined) expect([hops, recorded("@random")]).toEqual([hops, stored.t]);
          if (stored.u !== undefined) expect([hops, recorded("@uuid")]).toEqual([hops, stored.u]);
        }
      });
    }
  });
}
