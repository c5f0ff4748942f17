// The call scope (call-scope.ts's own hook, off a second after the last run stops)
// followed into the callbacks of the asynchronous constructs workflow code uses, each run
// begun with the hook turned off: a ctx call made from such a callback continues from the
// call made before it, and one made from a step body through it is refused.

import { AsyncLocalStorage, AsyncResource } from "node:async_hooks";
import { EventEmitter, once } from "node:events";
import { readFile } from "node:fs/promises";
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { captureScope, scopeHook } from "../src/workflow/call-scope.js";

const where = () => {
  const s = captureScope() as { key?: string; root?: true; bodyOf?: string } | undefined;
  if (s === undefined) return "none";
  return s.key ?? (s.bodyOf ? `body:${s.bodyOf}` : s.root ? "root" : "?");
};

/** Turns the hook off as late-work.ts's timer does (from a timer, not inside a promise job). */
const hookOff = () =>
  new Promise<void>((r) =>
    setTimeout(() => {
      scopeHook.disable();
      r();
    }, 0),
  );

/** Runs `f` from the callback of one construct; resolves with what it returned. */
type Via = <T>(f: () => T) => Promise<T>;

const CONSTRUCTS: Array<[string, Via]> = [
  [
    "a thenable's then",
    (f) =>
      new Promise((r) => {
        const thenable = {
          // biome-ignore lint/suspicious/noThenProperty: a thenable (a non-native promise) is what is followed here.
          then: (ok: (v: unknown) => void) => ok(f()),
        };
        r(Promise.resolve(thenable) as never);
      }),
  ],
  ["a setTimeout callback", (f) => new Promise((r) => setTimeout(() => r(f()), 1))],
  ["a setImmediate callback", (f) => new Promise((r) => setImmediate(() => r(f())))],
  ["a process.nextTick callback", (f) => new Promise((r) => process.nextTick(() => r(f())))],
  ["a queueMicrotask callback", (f) => new Promise((r) => queueMicrotask(() => r(f())))],
  [
    "a setInterval callback (third firing)",
    (f) =>
      new Promise((r) => {
        let n = 0;
        const t = setInterval(() => {
          if (++n < 3) return;
          clearInterval(t);
          r(f());
        }, 1);
      }),
  ],
  ["a file read's then", (f) => readFile(new URL(import.meta.url)).then(() => f())],
  [
    "an EventEmitter listener fired from a timer",
    (f) =>
      new Promise((r) => {
        const e = new EventEmitter();
        e.on("x", () => r(f()));
        setTimeout(() => e.emit("x"), 1);
      }),
  ],
  [
    "events.once",
    async (f) => {
      const e = new EventEmitter();
      setImmediate(() => e.emit("x"));
      await once(e, "x");
      return f();
    },
  ],
  [
    "an async generator",
    async (f) => {
      async function* gen() {
        yield 1;
        await new Promise((r) => setTimeout(r, 1));
        yield f();
      }
      let last: unknown;
      for await (const v of gen()) last = v;
      return last as never;
    },
  ],
  [
    "a stream's data listener",
    (f) =>
      new Promise((r) => {
        const s = Readable.from(["a"]);
        s.on("data", () => r(f()));
      }),
  ],
  [
    "an AbortSignal listener (abort from a timer)",
    (f) =>
      new Promise((r) => {
        const ac = new AbortController();
        ac.signal.addEventListener("abort", () => r(f()));
        setTimeout(() => ac.abort(), 1);
      }),
  ],
  [
    "a user's AsyncLocalStorage.run",
    (f) =>
      new AsyncLocalStorage<number>().run(1, () => new Promise((r) => setTimeout(() => r(f()), 1))),
  ],
  [
    "an AsyncResource.bind'd function called from a timer",
    (f) => {
      const bound = AsyncResource.bind(f);
      return new Promise((r) => setTimeout(() => r(bound()), 1));
    },
  ],
  [
    "an AsyncLocalStorage.snapshot called from a timer",
    (f) => {
      const snap = AsyncLocalStorage.snapshot();
      return new Promise((r) => setTimeout(() => r(snap(f)), 1));
    },
  ],
];

describe("call scope into callbacks, the hook off when each run begins", () => {
  it.each(CONSTRUCTS)("a ctx call from %s continues from the call before it", async (_n, via) => {
    const seen: string[] = [];
    const wf = workflow({ name: "probe", version: "1" }, async (ctx) => {
      await ctx.step("a", () => 1);
      seen.push(await via(() => where()));
      // A reused name after own work: accepted only if the call tree shows it continues
      // from the first "a" (context.ts, beginCall).
      await via(() => ctx.step("a", () => 2));
      // The callback's own flow went on from the call it made.
      seen.push(await via(() => ctx.step("a", () => 3).then(() => where())));
      return 0;
    });
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    try {
      await hookOff();
      expect(await (await engine.start(wf, undefined)).result()).toBe(0);
    } finally {
      await engine.close();
    }
    expect(seen).toEqual(["a", "a#3"]);
  });

  it.each(CONSTRUCTS)("a ctx call in a step body from %s is refused", async (_n, via) => {
    const wf = workflow({ name: "probe-body", version: "1" }, async (ctx) =>
      ctx.step("outer", () => via(() => ctx.step("inner", () => 1))),
    );
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    try {
      await hookOff();
      const err = await (await engine.start(wf, undefined)).result().catch((x: unknown) => x);
      expect(String(err)).toMatch(
        /ctx\.step\("inner"\) was called inside the body of step "outer"/,
      );
    } finally {
      await engine.close();
    }
  });
});
