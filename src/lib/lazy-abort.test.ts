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

describe("LazyAbort listeners", () => {
  it("onAbort hears the first abort once, and not after it stopped listening", () => {
    const a = new LazyAbort();
    const heard: string[] = [];
    a.onAbort(() => heard.push("kept"));
    const stop = a.onAbort(() => heard.push("stopped"));
    stop();
    expect(a.aborted).toBe(false);
    a.abort(new Error("first"));
    a.abort(new Error("second"));
    expect(heard).toEqual(["kept"]);
    expect(a.aborted).toBe(true);
    expect((a.reason as Error).message).toBe("first");
  });

  it.each([
    [true, 0],
    [false, 1],
  ])("unlimitedListeners %s: 50 listeners give %i leak warnings", async (unlimited, count) => {
    const a = new LazyAbort({ unlimitedListeners: unlimited });
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      for (let i = 0; i < 50; i++) a.signal.addEventListener("abort", () => {});
      // Node emits the warning on a later tick.
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off("warning", onWarning);
    }
    expect(warnings.filter((n) => n === "MaxListenersExceededWarning")).toHaveLength(count);
  });
});
