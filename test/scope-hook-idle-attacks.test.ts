// The scope hook (call-scope.ts) is turned off by one re-arming timer once no run was
// tracked for a second (late-work.ts, this stop). Attacks: a run suspended across that
// second and woken after, and runs that stop and start again inside the second, keep their
// scopes: a ctx call made inside a step body, after awaits, is still found.
//
// The hook and its timer are the process's, not an engine's: each attack runs on every
// backend at once, in step (the same waits, at the same moments), so the idle seconds the
// attacks wait out are waited once for all backends, not once per backend.

import { setTimeout as delay } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type Engine, workflow } from "../src/index.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const tick = () => new Promise<void>((r) => setImmediate(r));
const NESTED = /ctx\.step\("inner"\) was called inside the body of step "outer"/;

/** `phase` on every backend at once; a failure names its backend. */
async function onEach<T>(
  items: T[],
  backendOf: (item: T) => string,
  phase: (item: T) => Promise<void>,
): Promise<void> {
  await Promise.all(
    items.map((item) =>
      phase(item).catch((err: unknown) => {
        if (err instanceof Error) err.message = `${backendOf(item)}: ${err.message}`;
        throw err;
      }),
    ),
  );
}

describe(`scopes across the hook's idle second (${BACKENDS.join(" and ")}, at once)`, () => {
  it("a run suspended past the idle second, woken after, still finds a nested ctx call", async () => {
    const wf = workflow({ name: "wake-nested", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("go");
      return ctx.step("outer", async () => {
        await tick();
        await delay(1);
        return ctx.step("inner", () => 1);
      });
    });
    const on = BACKENDS.map((backend) => {
      const storage = freshStorage(backend, cleanups);
      const engine = createEngine({ store: storage(), workflows: [wf], pollIntervalMs: 10 });
      cleanups.push(() => engine.close());
      return { backend, engine, runId: "" };
    });
    const name = (x: { backend: string }) => x.backend;
    await onEach(on, name, async (x) => {
      x.runId = (await x.engine.start(wf, undefined)).id;
      for (let i = 0; i < 200; i++) {
        if ((await x.engine.getRun(x.runId))?.status === "waiting") break;
        await delay(10);
      }
      expect((await x.engine.getRun(x.runId))?.status).toBe("waiting");
    });
    await delay(1_300); // the hook is off now: no backend's run was tracked for a second
    await onEach(on, name, async (x) => {
      await x.engine.sendEvent(x.runId, "go", null);
      const err = await x.engine
        .handle(x.runId)
        .result()
        .catch((e: unknown) => e);
      expect((err as Error).message).toMatch(NESTED);
    });
  });

  it("runs stopping and starting within the second: the re-armed timer leaves a later run its scopes", async () => {
    const quick = workflow({ name: "quick", version: "1" }, async () => 1);
    const nested = workflow({ name: "nested-later", version: "1" }, async (ctx) =>
      ctx.step("outer", async () => {
        await delay(400); // the hook's timer fires while this body waits
        await tick();
        return ctx.step("inner", () => 1);
      }),
    );
    const on = BACKENDS.map((backend) => {
      const storage = freshStorage(backend, cleanups);
      const engine = createEngine({
        store: storage(),
        workflows: [quick, nested],
        pollIntervalMs: 10,
      });
      cleanups.push(() => engine.close());
      return { backend, engine };
    });
    const name = (x: { backend: string }) => x.backend;
    const each = (phase: (e: Engine) => Promise<void>) => onEach(on, name, (x) => phase(x.engine));
    await each(async (e) => {
      await (await e.start(quick, undefined)).result();
    });
    await delay(700);
    await each(async (e) => {
      await (await e.start(quick, undefined)).result();
    });
    await delay(700); // the first timer fired, idle 0.7 s: re-armed for 0.3 s
    await each(async (e) => {
      const run = await e.start(nested, undefined);
      const err = await run.result().catch((x: unknown) => x);
      expect((err as Error).message).toMatch(NESTED);
    });
    await delay(1_200);
    await each(async (e) => {
      const again = await e.start(nested, undefined);
      expect(((await again.result().catch((x: unknown) => x)) as Error).message).toMatch(NESTED);
    });
  });
});
