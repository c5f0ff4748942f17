// OpenTelemetry: with an SDK registered (an in-memory exporter here), a run's executions and
// step attempts are spans with cairn's attributes, errors are recorded by name and code
// (never a message), and the context of start() is carried into the run: a run killed
// mid-step and taken over by another worker shows as one trace under the span that started
// it. A child run joins its parent's trace.

import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager().enable();
trace.setGlobalTracerProvider(provider);
context.setGlobalContextManager(contextManager);
afterAll(() => {
  trace.disable();
  context.disable();
});

const tracer = trace.getTracer("test");
const SECRET = "SpanSecret5c2d";

function spansOf(runId: string): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((s) => s.attributes["cairn.run.id"] === runId);
}

const parentIdOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe.each(BACKENDS)("OpenTelemetry spans (%s)", (backend) => {
  const harness = useHarness(backend);
  beforeEach(() => exporter.reset());

  it("a run killed mid-step and resumed by another worker is one trace under start()'s span", async () => {
    const h = harness();
    let hang = true;
    let failedOnce = false;
    let inFlight = false;
    const wf = workflow({ name: "traced", version: "1" }, async (ctx) => {
      await ctx.step("a", (s) => {
        s.spend({ usd: 0.5 });
        return 1;
      });
      await ctx.step(
        "b",
        async () => {
          if (!failedOnce) {
            failedOnce = true;
            throw new Error(`${SECRET} flaky`);
          }
          if (hang) {
            inFlight = true;
            await new Promise(() => {}); // the first worker dies here
          }
          return 2;
        },
        { retry: { initialDelay: "1ms", jitter: false } },
      );
      return "done";
    });
    const first = crashableEngine(h, [wf]);
    let runId = "";
    let request: { traceId: string; spanId: string } | undefined;
    await tracer.startActiveSpan("request", async (span) => {
      runId = (await first.engine.start(wf, undefined)).id;
      request = span.spanContext();
      span.end();
    });
    await until(async () => {
      await h.clock.advance(5);
      return inFlight;
    }, "b's second attempt is in flight");
    first.crash();
    hang = false;
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    expect(await advanceUntil(h.clock, second.handle(runId).result(), 1_000)).toBe("done");
    // result() resolves from the durable completion; the execution span ends just after.
    await until(
      async () => spansOf(runId).some((s) => s.name === "cairn.run traced"),
      "the run span ended",
    );

    const spans = spansOf(runId);
    // Every span of the run, from both workers, is in the trace start() was called in.
    expect(spans.length).toBeGreaterThanOrEqual(5);
    expect(new Set(spans.map((s) => s.spanContext().traceId))).toEqual(new Set([request!.traceId]));
    // The killed execution's span never ended (as after a real kill); the one that took the
    // run over is a child of the request span, recovered, completed.
    const starts = spans.filter((s) => s.name === "cairn.start traced");
    expect(starts).toHaveLength(1);
    expect(parentIdOf(starts[0]!)).toBe(request!.spanId);
    const runs = spans.filter((s) => s.name === "cairn.run traced");
    expect(runs).toHaveLength(1);
    const resumed = runs[0]!;
    expect(parentIdOf(resumed)).toBe(starts[0]!.spanContext().spanId);
    expect(resumed.attributes).toMatchObject({
      "cairn.workflow.name": "traced",
      "cairn.workflow.version": "1",
      "cairn.run.recovered": true,
      "cairn.run.outcome": "completed",
    });
    const steps = spans.filter((s) => s.name.startsWith("cairn.step "));
    const view = steps.map((s) => [
      s.attributes["cairn.step.key"],
      s.attributes["cairn.step.attempt"],
      s.attributes["cairn.step.outcome"],
    ]);
    // a (ok) and b's failed first attempt on the first worker; b's attempt 2 died with it
    // (recorded as WORKER_LOST); attempt 3 completes on the second worker.
    expect(view).toEqual([
      ["a", 1, "ok"],
      ["b", 1, "retry"],
      ["b", 3, "ok"],
    ]);
    const [a, bRetry, bOk] = steps;
    expect(a!.attributes).toMatchObject({ "cairn.step.kind": "step", "cairn.spend.usd": 0.5 });
    expect(parentIdOf(bOk!)).toBe(resumed.spanContext().spanId);
    // The first worker's step spans hang under its (never-ended) execution span.
    expect(parentIdOf(a!)).toBe(parentIdOf(bRetry!));
    expect(parentIdOf(a!)).not.toBe(resumed.spanContext().spanId);
    // Errors are recorded by name, never by message.
    expect(bRetry!.events.map((e) => e.name)).toEqual(["exception"]);
    expect(bRetry!.events[0]?.attributes?.["exception.type"]).toBe("Error");
    expect(
      JSON.stringify(exporter.getFinishedSpans().map((s) => [s.attributes, s.events])),
    ).not.toContain(SECRET);
  });

  it("a failed run's span records the error; a child run joins its parent's trace", async () => {
    const h = harness();
    const child = workflow({ name: "child", version: "1" }, async (ctx) => ctx.step("c", () => 3));
    const parent = workflow({ name: "parent", version: "1" }, async (ctx) => {
      await ctx.child("kid", child, undefined);
      await ctx.step("boom", () => {
        throw new FatalError(`${SECRET} in a message`);
      });
    });
    const e = h.engine([parent, child]);
    const run = await e.start(parent, undefined);
    await expect(advanceUntil(h.clock, run.result(), 5)).rejects.toThrow(FatalError);
    const parentSpans = spansOf(run.id);
    const failedRun = parentSpans.filter((s) => s.attributes["cairn.run.outcome"] === "failed");
    expect(failedRun).toHaveLength(1);
    expect(failedRun[0]!.status.code).toBe(2); // ERROR
    expect(failedRun[0]!.events[0]?.attributes).toMatchObject({
      "exception.type": "FatalError",
      "exception.message": "FatalError (FATAL)",
    });
    const childRunId = `${run.id}/kid`;
    const childSpans = spansOf(childRunId);
    expect(childSpans.length).toBeGreaterThan(0);
    // No span was active at start(): its cairn.start span is the root of the trace, which the
    // parent's executions (one or two: it may suspend while its child runs) and the child
    // share.
    const parentRuns = parentSpans.filter((s) => s.name === "cairn.run parent");
    expect(parentRuns.length).toBeGreaterThanOrEqual(1);
    const traceIds = new Set([...parentSpans, ...childSpans].map((s) => s.spanContext().traceId));
    expect(traceIds.size).toBe(1);
    const root = parentSpans.find((s) => s.name === "cairn.start parent");
    expect(root && parentIdOf(root)).toBeUndefined();
    expect(
      JSON.stringify(exporter.getFinishedSpans().map((s) => [s.attributes, s.events])),
    ).not.toContain(SECRET);
  });
});
