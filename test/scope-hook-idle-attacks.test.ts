// The scope hook (call-scope.ts) is turned off by one re-arming timer once no run was
// tracked for a second (late-work.ts, this stop). Attacks: a run suspended across that
// second and woken after, and runs that stop and start again inside the second, keep their
// scopes: a ctx call made inside a step body, after awaits, is still found.

import { setTimeout as delay } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const tick = () => new Promise<void>((r) => setImmediate(r));
const NESTED = /ctx\.step\("inner"\) was called inside the body of step "outer"/;

for (const backend of BACKENDS) {
  describe(`${backend}: scopes across the hook's idle second`, () => {
    it("a run suspended past the idle second, woken after, still finds a nested ctx call", async () => {
      const storage = freshStorage(backend, cleanups);
      const wf = workflow({ name: "wake-nested", version: "1" }, async (ctx) => {
        await ctx.waitForEvent("go");
        return ctx.step("outer", async () => {
          await tick();
          await delay(1);
          return ctx.step("inner", () => 1);
        });
      });
      const engine = createEngine({ store: storage(), workflows: [wf], pollIntervalMs: 10 });
      cleanups.push(() => engine.close());
      const run = await engine.start(wf, undefined);
      for (let i = 0; i < 200; i++) {
        if ((await engine.getRun(run.id))?.status === "waiting") break;
        await delay(10);
      }
      expect((await engine.getRun(run.id))?.status).toBe("waiting");
      await delay(1_300); // the hook is off now
      await engine.sendEvent(run.id, "go", null);
      const err = await run.result().catch((x: unknown) => x);
      expect((err as Error).message).toMatch(NESTED);
    });

    it("runs stopping and starting within the second: the re-armed timer leaves a later run its scopes", async () => {
      const storage = freshStorage(backend, cleanups);
      const quick = workflow({ name: "quick", version: "1" }, async () => 1);
      const nested = workflow({ name: "nested-later", version: "1" }, async (ctx) =>
        ctx.step("outer", async () => {
          await delay(400); // the hook's timer fires while this body waits
          await tick();
          return ctx.step("inner", () => 1);
        }),
      );
      const engine = createEngine({
        store: storage(),
        workflows: [quick, nested],
        pollIntervalMs: 10,
      });
      cleanups.push(() => engine.close());
      await (await engine.start(quick, undefined)).result();
      await delay(700);
      await (await engine.start(quick, undefined)).result();
      await delay(700); // the first timer fired, idle 0.7 s: re-armed for 0.3 s
      const run = await engine.start(nested, undefined);
      const err = await run.result().catch((x: unknown) => x);
      expect((err as Error).message).toMatch(NESTED);
      await delay(1_200);
      const again = await engine.start(nested, undefined);
      expect(((await again.result().catch((x: unknown) => x)) as Error).message).toMatch(NESTED);
    });
  });
}
