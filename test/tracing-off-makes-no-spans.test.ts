// While tracing is off (no SDK registered, the API's no-op context manager), start() and an
// execution make no span at all (tracing.ts, tracingOff). A context manager alone, with no
// SDK, is not "off": a span context active at start() (extracted from an incoming request)
// is still stored with the run, as the no-op tracer's span handed it on before.

import { context, ROOT_CONTEXT, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { sqliteStore } from "../src/sqlite.js";

const traceId = "0af7651916cd43dd8448eb211c80319c";
const spanId = "b7ad6b7169203331";
const wf = workflow({ name: "traced-off", version: "1" }, async (ctx) => {
  return await ctx.step("s", () => trace.getActiveSpan()?.spanContext().traceId ?? "none");
});

async function startedTraceContext(): Promise<{ stored: string | null; seen: unknown }> {
  const store = sqliteStore(":memory:");
  const engine = createEngine({ store, workflows: [wf] });
  try {
    const remote = trace.setSpanContext(ROOT_CONTEXT, {
      traceId,
      spanId,
      traceFlags: 1,
      isRemote: true,
    });
    const handle = await context.with(remote, () => engine.start(wf, undefined));
    const seen = await handle.result();
    return { stored: (await store.getRun(handle.id))?.traceContext ?? null, seen };
  } finally {
    await engine.close();
  }
}

describe("tracing off", () => {
  afterEach(() => context.disable());

  it("with no SDK and no context manager, a run stores no trace context", async () => {
    expect(await startedTraceContext()).toEqual({ stored: null, seen: "none" });
  });

  it("with a context manager and no SDK, the active span context is stored with the run and seen by its steps", async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    expect(await startedTraceContext()).toEqual({
      stored: `00-${traceId}-${spanId}-01`,
      seen: traceId,
    });
  });
});
