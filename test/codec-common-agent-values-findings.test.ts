// Values agents commonly hand back from steps and tools, after the codec began to refuse what
// a copy would lose (kept-whole.ts, error-parts.ts): each was refused, or refused with a path
// that named nothing the value holds. Each test failed before its mend.

import { AISDKError, APICallError, TypeValidationError } from "@ai-sdk/provider";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { decode, encode } from "../src/codec/codec.js";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { sameValue } from "./helpers/value-equality.js";

const roundTrip = <T>(v: T): T => decode<T>(encode(v));

function apiCallError(statusCode: number): APICallError {
  return new APICallError({
    message: "Too Many Requests",
    url: "https://api.example.com/v1/chat",
    requestBodyValues: { model: "m" },
    statusCode,
    responseHeaders: { "retry-after": "2" },
    responseBody: "{}",
  });
}

describe("an AI SDK error (its markers are Symbol.for symbols) is stored whole", () => {
  it("with its data, and its isInstance still true", () => {
    const back = roundTrip({ status: "rejected", reason: apiCallError(429) }).reason;
    expect(APICallError.isInstance(back)).toBe(true);
    expect(AISDKError.isInstance(back)).toBe(true);
    const e = back as APICallError;
    expect([e.name, e.statusCode, e.isRetryable, e.responseHeaders]).toEqual([
      "AI_APICallError",
      429,
      true,
      { "retry-after": "2" },
    ]);
  });

  it("a symbol that is not registered is still refused, naming the path", () => {
    const e = Object.assign(new Error("tagged"), { [Symbol("trace")]: 1 });
    expect(() => encode({ e })).toThrow(/an Error with symbol keys .* at \.e/);
  });
});

describe("an Error's non-enumerable properties other than cause and errors are not stored", () => {
  it("a ZodError (its hidden _zod holds functions), alone or as an AI SDK error's cause", () => {
    const parsed = z.object({ a: z.string() }).safeParse({ a: 1 });
    const back = roundTrip(parsed) as { success: boolean; error: Error };
    expect(back.error.name).toBe("ZodError");
    expect(back.error.message).toContain("expected string");
    expect(Object.hasOwn(back.error, "_zod")).toBe(false);
    const wrapped = new TypeValidationError({ value: { a: 1 }, cause: parsed.error });
    const again = roundTrip(wrapped);
    expect(TypeValidationError.isInstance(again)).toBe(true);
    expect((again.cause as Error).name).toBe("ZodError");
  });

  it("a cause given as an option and an AggregateError's errors still are", () => {
    const back = roundTrip(new AggregateError([1], "m", { cause: 2 }));
    expect([back.errors, back.cause]).toEqual([[1], 2]);
  });
});

describe("a refusal inside an Error names the path the value holds", () => {
  it("an HTTP client's error holding functions (axios-style config)", () => {
    const err = Object.assign(new Error("Request failed with status code 500"), {
      config: { url: "/x", adapter: () => undefined },
    });
    expect(() => encode({ result: { error: err } })).toThrow(
      "cannot store a function at .result.error.config.adapter (a property of the Error at .result.error: store a plain object with the parts of it you need, such as its message and status)",
    );
    expect(() => encode(new Error("m", { cause: { f() {} } }))).toThrow(/at \.cause\.f /);
  });
});

describe("a regex match is stored with its index, input and groups (h6: it was refused)", () => {
  it("match, exec, matchAll", () => {
    const m = roundTrip({ m: "a=b".match(/=/) }).m;
    expect([m?.[0], m?.index, m?.input]).toEqual(["=", 1, "a=b"]);
    expect(roundTrip(/=/.exec("a=b"))?.index).toBe(1);
    expect(roundTrip([..."a=b=".matchAll(/=/g)]).map((x) => x.index)).toEqual([1, 3]);
  });
});

describe.each(BACKENDS)("a tool's AI SDK error, first run and replay (%s)", (backend) => {
  const harness = useHarness(backend);

  it("is handed over whole, the same both times", async () => {
    const h = harness();
    const seen: unknown[] = [];
    const wf = workflow({ name: "ai-error", version: "1" }, async (ctx) => {
      const settled = await ctx.step("call", async () => {
        const [r] = await Promise.allSettled([Promise.reject(apiCallError(503))]);
        return r;
      });
      seen.push(settled);
      await ctx.sleep("nap", 1000);
      const reason = (settled as PromiseRejectedResult).reason;
      return APICallError.isInstance(reason) && reason.isRetryable;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "r" });
    await until(async () => (await e.getRun("r"))?.status === "waiting", "the run waits");
    expect(await advanceUntil(h.clock, run.result(), 1000, 100)).toBe(true);
    expect(seen).toHaveLength(2);
    expect(sameValue(seen[0], seen[1])).toBeUndefined();
  });
});

describe("the cheap pass (codec.ts) after its speed mends", () => {
  it("an Error's counting getter is read once; an array without a prototype is still refused", () => {
    let reads = 0;
    const e = new Error("m");
    // Its stack formatted now: V8 formats it on the first read, reading the message.
    void e.stack;
    Object.defineProperty(e, "message", {
      get: () => `read ${++reads}`,
      enumerable: false,
      configurable: true,
    });
    // The typed array after it stops the cheap pass: the getter must not run again.
    expect((roundTrip({ e, bytes: new Uint8Array([1]) }).e as Error).message).toBe("read 1");
    expect(reads).toBe(1);
    expect(() => encode({ a: Object.setPrototypeOf([1], null) })).toThrow(
      /an Array of another class or prototype .* at \.a/,
    );
    const withProps = Object.assign(new Error("p"), { status: 1 });
    expect((roundTrip([withProps, 1])[0] as Error & { status: number }).status).toBe(1);
  });
});
