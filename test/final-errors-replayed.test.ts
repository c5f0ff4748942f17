// A step's final error, as agents' code meets them (an SDK's error subclass with a status
// and a body, an AggregateError, a DOMException AbortError, a numeric code, a cause chain, a
// TypeError, an Error without a message, a string cause), caught by the workflow: the replay
// after a sleep, which reads each from the journal, hands the workflow the very error the
// first execution was handed (its class, name, message, code, own properties and cause), and
// the name, the message and a string code are those thrown.

import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

class ApiError extends Error {
  status = 429;
  body = { retry: [1, 2n] };
  constructor(m: string) {
    super(m);
    this.name = "ApiError";
  }
}

const THROWN: Array<[string, () => Error]> = [
  ["api", () => new ApiError("rate limited")],
  ["aggregate", () => new AggregateError([new Error("a"), new TypeError("b")], "all failed")],
  ["chain", () => new FatalError("top", { cause: new Error("mid", { cause: { code: "E" } }) })],
  ["numeric-code", () => Object.assign(new Error("num"), { code: 14 })],
  ["string-code", () => Object.assign(new Error("reset"), { code: "ECONNRESET" })],
  ["abort", () => new DOMException("aborted", "AbortError")],
  ["fatal-props", () => Object.assign(new FatalError("fp"), { status: 503 })],
  ["type", () => new TypeError("bad type")],
  ["no-message", () => new Error()],
  ["string-cause", () => new RangeError("r", { cause: "plain" })],
];

const text = (v: unknown): unknown =>
  typeof v === "bigint"
    ? `${v}n`
    : v instanceof Error
      ? described(v)
      : Array.isArray(v)
        ? v.map(text)
        : v && typeof v === "object"
          ? JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? `${x}n` : x))
          : v;

/** Everything the workflow can see of an error but its stack. */
function described(e: Error): unknown {
  const own: Record<string, unknown> = {};
  for (const k of Object.getOwnPropertyNames(e))
    if (k !== "stack") own[k] = text((e as unknown as Record<string, unknown>)[k]);
  return {
    class: e.constructor.name,
    prototypes: [FatalError, TypeError, RangeError, AggregateError, DOMException].map(
      (c) => e instanceof c,
    ),
    name: e.name,
    message: e.message,
    own,
    cause: text(e.cause),
  };
}

describe.each(BACKENDS)("a step's final error, first execution and replay (%s)", (backend) => {
  const harness = useHarness(backend);

  it("hands the same error over both times", async () => {
    const h = harness();
    const handed: Array<Array<[string, unknown]>> = [];
    const wf = workflow({ name: "final-errors", version: "1" }, async (ctx) => {
      const mine: Array<[string, unknown]> = [];
      handed.push(mine);
      for (const [name, make] of THROWN) {
        try {
          await ctx.step(
            name,
            () => {
              throw make();
            },
            { retry: { maxAttempts: 1 } },
          );
        } catch (e) {
          mine.push([name, described(e as Error)]);
        }
      }
      await ctx.sleep("nap", "1h");
      return "done";
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    // The clock moves only once the run sleeps: moved while the sleep's intent was being
    // committed (a slow commit on PostgreSQL), it passed the wake time and the run went on
    // without suspending, so nothing was replayed.
    await until(async () => (await engine.getRun(run.id))?.status === "waiting", "the run sleeps");
    expect(await advanceUntil(h.clock, run.result(), 3_600_000, 50)).toBe("done");
    expect(handed.length).toBe(2);
    const [first, replay] = handed as [Array<[string, unknown]>, Array<[string, unknown]>];
    expect(first.map(([n]) => n)).toEqual(THROWN.map(([n]) => n));
    expect(replay).toEqual(first);
    for (const [i, [name, make]] of THROWN.entries()) {
      const thrown = make();
      const g = first[i]?.[1] as { name: string; message: string; own: Record<string, unknown> };
      expect([g.name, g.message], name).toEqual([thrown.name, thrown.message]);
      const code = (thrown as { code?: unknown }).code;
      if (typeof code === "string") expect(g.own.code, name).toBe(code);
    }
  });
});
