import { describe, expect, it } from "vitest";
import { LazyAbort } from "./lazy-abort.js";

describe("LazyAbort", () => {
  it("a signal asked for before the abort is aborted with its reason, once", () => {
    const a = new LazyAbort();
    const signal = a.signal;
    let heard = 0;
    signal.addEventListener("abort", () => heard++);
    expect(signal.aborted).toBe(false);
    a.abort(new Error("first"));
    a.abort(new Error("second"));
    expect(signal.aborted).toBe(true);
    expect((signal.reason as Error).message).toBe("first");
    expect(heard).toBe(1);
    expect(a.signal).toBe(signal);
  });

  it("a signal first asked for after the abort is born aborted with the first reason", () => {
    const a = new LazyAbort();
    a.abort(new Error("timed out"));
    a.abort(new Error("later"));
    expect(a.signal.aborted).toBe(true);
    expect((a.signal.reason as Error).message).toBe("timed out");
  });

  it("is never aborted when nothing aborts it", () => {
    expect(new LazyAbort().signal.aborted).toBe(false);
  });
});
