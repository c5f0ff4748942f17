// The end-of-run check (context.ts, unreplayedAtEnd) gives a call the first run made late
// (after awaiting something that is not a cairn call) up to replayStallMs to be made again,
// but judged a begun intent (an effect about to perform, a child started) at once, as if
// every intent had been made inside a cascade: intents did not record whether their call
// was late. So a branch that awaits network I/O of its own and then begins an effect, while
// the function returns, was refused on a replay (NonDeterminismError) though the replay's
// branch was on its way to the same call. An intent now records that its call was late.
//
// Also on an encrypted store (the intent's data is encrypted at rest and decrypted when the
// journal loads), and a late intent whose replay never makes its call: refused once
// replayStallMs has passed, not waited for for ever.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { encryptedStore, type Store, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const realDelay = (ms: number) => new Promise((r) => setTimeout(r, ms));

const keys = [{ id: "k1", key: randomBytes(32).toString("base64") }];
const STORES = [
  { name: "plain", wrap: (store: Store) => store },
  { name: "encrypted", wrap: (store: Store) => encryptedStore(store, { keys }) },
];

describe.each(BACKENDS.flatMap((backend) => STORES.map((store) => ({ backend, store }))))(
  "$backend, $store.name: intents begun late, judged at the end of a replay",
  ({ backend, store }) => {
    const harness = useHarness(backend);

    it("an effect a branch began after I/O of its own is waited for, not refused, when the replayed function returns first", async () => {
      const h = harness();
      // The branch's I/O, one per execution: a fetch whose answer comes when the test says.
      // (Created by the test, it is nothing late-work.ts sees pending, as a long fetch is not.)
      const fetches = [deferred(), deferred(), deferred()];
      let executions = 0;
      let performs = 0;
      // Keeps the first execution busy (so not suspended) until the branch has begun.
      const prepared = deferred();
      const wf = workflow({ name: `late-intent-${store.name}`, version: "1" }, async (ctx) => {
        const fetched = fetches[executions++]!.promise;
        const branch = (async () => {
          await fetched;
          return ctx.effect(
            "notify",
            {
              perform: () => {
                if (++performs === 1) throw new Error("the service hiccuped");
                return "sent";
              },
              reconcile: () => undefined,
            },
            { retry: { initialDelay: "10m", jitter: false } },
          );
        })();
        branch.catch(() => {});
        await ctx.step("prepare", () => prepared.promise);
        const go = await ctx.waitForEvent("go");
        return go.timedOut ? "timed out" : "done";
      });
      const engine = h.engine([wf], { replayStallMs: 30_000, store: store.wrap(h.store()) });
      const run = await engine.start(wf, undefined);
      await until(() => executions === 1, "the first execution starts");
      // Answered from a timer of the test, as a socket's answer comes in a turn of its own (a
      // promise the test resolved inside the start's cascade would resume the branch in it).
      await realDelay(50);
      fetches[0]!.resolve();
      // The effect's intent is written, its perform fails, and its 10-minute backoff and the
      // event wait leave the run waiting.
      await until(() => performs === 1, "the effect's first perform");
      prepared.resolve();
      await until(
        async () => performs === 1 && (await engine.getRun(run.id))?.status === "waiting",
        "the run waits with the effect begun",
      );
      await engine.sendEvent(run.id, "go", 1);
      await until(() => executions === 2, "the run replays");
      // The replayed function returns at once (its wait replays the event); the branch's fetch
      // answers a moment later, as a real one would.
      await realDelay(300);
      fetches[1]!.resolve();
      // No virtual time passes: the replay needs none (the effect's backoff is the completed
      // run's to cut), and leases must not run out under it.
      expect(await engine.handle(run.id).result()).toBe("done");
    });

    it("a late intent whose replay never makes its call again is refused after replayStallMs", async () => {
      const h = harness();
      const fetches = [deferred(), deferred()];
      let executions = 0;
      let performs = 0;
      let branchOn = true;
      const prepared = deferred();
      const wf = workflow(
        { name: `late-intent-dropped-${store.name}`, version: "1" },
        async (ctx) => {
          const fetched = fetches[executions++]!.promise;
          if (branchOn) {
            const branch = (async () => {
              await fetched;
              return ctx.effect(
                "notify",
                {
                  perform: () => {
                    performs++;
                    throw new Error("the service hiccuped");
                  },
                  reconcile: () => undefined,
                },
                { retry: { initialDelay: "10m", jitter: false } },
              );
            })();
            branch.catch(() => {});
          }
          await ctx.step("prepare", () => prepared.promise);
          const go = await ctx.waitForEvent("go");
          return go.timedOut ? "timed out" : "done";
        },
      );
      const engine = h.engine([wf], {
        replayStallMs: 500,
        store: store.wrap(h.store()),
      });
      const run = await engine.start(wf, undefined);
      await until(() => executions === 1, "the first execution starts");
      await realDelay(50);
      fetches[0]!.resolve();
      await until(() => performs === 1, "the effect's first perform");
      prepared.resolve();
      await until(
        async () => (await engine.getRun(run.id))?.status === "waiting",
        "the run waits with the effect begun",
      );
      branchOn = false; // the code no longer makes the effect its first run began
      await engine.sendEvent(run.id, "go", 1);
      const err = await engine
        .handle(run.id)
        .result()
        .then(
          () => undefined,
          (e: unknown) => e as Error,
        );
      expect(err?.name).toBe("NonDeterminismError");
      expect(err?.message).toContain('effect "notify"');
    });
  },
);
