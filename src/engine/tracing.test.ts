// A step attempt makes a span only while an OpenTelemetry SDK is registered: with the API's
// own proxy provider and nothing behind it, `attempt` answers undefined (no no-op span, its
// attributes and context: about a kilobyte per step). Once an SDK is registered, the same
// call makes a real span.

import { trace } from "@opentelemetry/api";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { afterEach, describe, expect, it } from "vitest";
import type { RunRecord } from "../store/store.js";
import { ExecutionTrace } from "./tracing.js";

const run = {
  id: "run_trace",
  workflow: "wf",
  version: "1",
  epoch: 1,
  generation: 0,
  parentId: null,
  traceContext: null,
} as unknown as RunRecord;
const info = { key: "s", name: "s", kind: "step" as const, attempt: 1 };

describe("ExecutionTrace.attempt", () => {
  afterEach(() => trace.disable());

  it("makes no span while no SDK is registered, and a real one once one is", () => {
    expect(new ExecutionTrace(run, false).attempt(info)).toBeUndefined();

    const exporter = new InMemorySpanExporter();
    trace.setGlobalTracerProvider(
      new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
    );
    const step = new ExecutionTrace(run, false).attempt(info);
    expect(step).toBeDefined();
    step?.end({ outcome: "ok", spend: {} });
    expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual(["cairn.step s"]);
  });
});
