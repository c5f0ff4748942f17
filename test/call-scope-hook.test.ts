// call-scope.ts carries the causal call tree on each asynchronous resource through one async
// hook, the same hook that tells late-work.ts of the workflow code's own work (issue 13: an
// AsyncLocalStorage beside late-work's hook made two hooks on every promise). That hook is
// off a moment after the last run stops; these hold that a run begun after it was turned
// off still carries its scopes across awaits, timers and immediates, and that an
// application's own AsyncLocalStorage goes on working around and inside a run.

import { AsyncLocalStorage } from "node:async_hooks";
import { describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { captureScope, scopeHook } from "../src/workflow/call-scope.js";

const tick = () => new Promise<void>((r) => setImmediate(r));
const timer = () => new Promise<void>((r) => setTimeout(r, 1));

describe("call scopes through the one hook", () => {
  it("a run begun after the hook was turned off still finds a ctx call made, after awaits, inside a step body", async () => {
    const nested = workflow({ name: "nested-after-await", version: "1" }, async (ctx) =>
      ctx.step("outer", async () => {
        await tick();
        await timer();
        return ctx.step("inner", () => 1);
      }),
    );
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [nested] });
    try {
      for (let i = 0; i < 2; i++) {
        // What the second after the last run stops does (late-work.ts, DISABLE_AFTER_MS).
        scopeHook.disable();
        const err = await (await engine.start(nested, undefined)).result().catch((x: unknown) => x);
        expect((err as Error).message).toMatch(
          /ctx\.step\("inner"\) was called inside the body of step "outer"/,
        );
      }
    } finally {
      await engine.close();
    }
  });

  it("the scope the workflow code stands in follows its awaits, and none leaks to the caller", async () => {
    const seen: string[] = [];
    const where = () => {
      const s = captureScope() as { key?: string; root?: true; bodyOf?: string } | undefined;
      return s === undefined ? "none" : (s.key ?? s.bodyOf ?? (s.root ? "root" : "?"));
    };
    const wf = workflow({ name: "scope-follows", version: "1" }, async (ctx) => {
      seen.push(where());
      await ctx.step("a", async () => {
        await tick();
        seen.push(`body:${where()}`);
        return 1;
      });
      seen.push(where());
      await timer();
      seen.push(where());
      const [x, y] = await Promise.all([
        (async () => {
          await ctx.step("b", () => 2);
          await tick();
          return where();
        })(),
        (async () => {
          await timer();
          await ctx.step("c", () => 3);
          return where();
        })(),
      ]);
      seen.push(x, y);
      return 0;
    });
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    try {
      scopeHook.disable();
      expect(await (await engine.start(wf, undefined)).result()).toBe(0);
      expect(where()).toBe("none");
    } finally {
      await engine.close();
    }
    expect(seen).toEqual(["root", "body:a", "a", "a", "b", "c"]);
  });

  it("an application's AsyncLocalStorage keeps its store around and inside a run", async () => {
    const app = new AsyncLocalStorage<string>();
    const inside: Array<string | undefined> = [];
    const wf = workflow({ name: "app-storage", version: "1" }, async (ctx) => {
      const v = await ctx.step("s", async () => {
        await app.run("in-body", async () => {
          await tick();
          inside.push(app.getStore());
        });
        return 1;
      });
      await app.run("in-workflow", async () => {
        await ctx.step("t", () => 2);
        inside.push(app.getStore());
      });
      return v;
    });
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    try {
      await app.run("caller", async () => {
        expect(await (await engine.start(wf, undefined)).result()).toBe(1);
        expect(app.getStore()).toBe("caller");
      });
    } finally {
      await engine.close();
    }
    expect(inside).toEqual(["in-body", "in-workflow"]);
  });
});
