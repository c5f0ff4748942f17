// OpenTelemetry through @opentelemetry/api alone: a no-op until the application registers
// an SDK. One span per execution of a run ("cairn.run <workflow>") and one per step attempt
// ("cairn.step <name>"), child of its execution's span. start() stores the caller's span
// context on the run (a W3C traceparent), and every execution's span is a child of it:
// the executions of a run that crashed, was taken over or resumed all sit in one trace,
// under the span that started it. A child run started from a workflow joins the same trace.
//
// Errors are recorded as exceptions with their name and code only: an error's message may
// quote a payload, and payloads never leave the store.

import {
  context,
  INVALID_SPAN_CONTEXT,
  type Context as OtelContext,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from "@opentelemetry/api";
import { callDroppingThrows } from "../lib/never-throws.js";
import type { Amounts, ErrorRecord, RunRecord, StepKind } from "../store/store.js";

const TRACER = "cairn";

/** An SDK that throws (a span processor's bug) must not fail a start or strand a run:
 *  tracing is observation, so its failures are dropped. */
const safely = callDroppingThrows;

/** A span from `start`, or a non-recording one when the SDK throws. */
function startSafely(start: () => Span): Span {
  try {
    return start();
  } catch {
    return trace.wrapSpanContext(INVALID_SPAN_CONTEXT);
  }
}
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** Runs `fn` (which creates the run) inside a "cairn.start <workflow>" span, a child of the
 *  active span (or the root of a new trace), and hands it that span's traceparent: every
 *  execution of the run becomes its child. null when no SDK records spans. */
export function withStartSpan<T>(
  run: { workflow: string; version: string; runId: string },
  fn: (traceparent: string | null) => Promise<T>,
): Promise<T> {
  // Its span would be a no-op one with no parent: no traceparent to store. (`fn` as it is:
  // an async wrapper per start is a hop through the promise hooks of every run.)
  if (tracingOff()) return fn(null);
  return withRecordedStartSpan(run, fn);
}

async function withRecordedStartSpan<T>(
  run: { workflow: string; version: string; runId: string },
  fn: (traceparent: string | null) => Promise<T>,
): Promise<T> {
  const span = startSafely(() =>
    trace.getTracer(TRACER).startSpan(`cairn.start ${run.workflow}`, {
      kind: SpanKind.PRODUCER,
      attributes: {
        "cairn.run.id": run.runId,
        "cairn.workflow.name": run.workflow,
        "cairn.workflow.version": run.version,
      },
    }),
  );
  try {
    return await fn(traceparentOf(span.spanContext()));
  } catch (err) {
    safely(() =>
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.name ?? "Error" }),
    );
    throw err;
  } finally {
    safely(() => span.end());
  }
}

/** The tracer step attempts use, or undefined while no SDK is registered (the API's global
 *  provider is still its own proxy with nothing behind it). A step attempt then makes no
 *  span at all: a no-op span, its attributes and its context cost about a kilobyte per
 *  step in a profile of short runs. A provider from another copy of the API counts as
 *  registered. */
function sdkTracer(): Tracer | undefined {
  const provider = trace.getTracerProvider();
  return provider instanceof ProxyTracerProvider
    ? provider.getDelegateTracer(TRACER)
    : provider.getTracer(TRACER);
}

/** A context made active only by a context manager that keeps one (not the API's no-op one). */
const PROBE = ROOT_CONTEXT.setValue(Symbol("cairn.trace-probe"), true);

/** Whether no span cairn makes can be recorded or seen: no SDK is registered (sdkTracer) and
 *  the context manager is the API's no-op one, so no context is ever active but the root,
 *  which holds no span. A no-op span, its attributes and its contexts cost 20-40 us a run
 *  (a start span and an execution span) in a profile of short runs, for nothing. */
function tracingOff(): boolean {
  return sdkTracer() === undefined && context.with(PROBE, () => context.active()) !== PROBE;
}

function traceparentOf(sc: SpanContext | undefined): string | null {
  if (!sc || !trace.isSpanContextValid(sc)) return null;
  const flags = (sc.traceFlags & 0xff).toString(16).padStart(2, "0");
  return `00-${sc.traceId}-${sc.spanId}-${flags}`;
}

function parentOf(traceparent: string | null): OtelContext {
  const m = TRACEPARENT.exec(traceparent ?? "");
  if (!m) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: m[1]!,
    spanId: m[2]!,
    traceFlags: Number.parseInt(m[3]!, 16),
    isRemote: true,
  });
}

function recordError(span: Span, error: ErrorRecord): void {
  span.recordException({
    name: error.name,
    message: error.code ? `${error.name} (${error.code})` : error.name,
  });
  span.setStatus({ code: SpanStatusCode.ERROR, message: error.name });
}

function spendAttributes(spend: Amounts): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(spend)) out[`cairn.spend.${k}`] = v;
  return out;
}

export interface AttemptInfo {
  key: string;
  name: string;
  kind: StepKind;
  attempt: number;
}

export type AttemptOutcome = "ok" | "error" | "retry" | "interrupted";

/** The span of one step attempt. */
export interface AttemptTrace {
  /** Runs the attempt's body with this span active (so the body's own spans nest). */
  run<T>(fn: () => T): T;
  end(p: { outcome: AttemptOutcome; spend: Amounts; error?: ErrorRecord }): void;
}

/** The span of one execution of a run, from claim to release. */
export class ExecutionTrace {
  /** undefined while tracing is off (tracingOff) at the execution's start. */
  private readonly span: Span | undefined;
  private ctxMade: OtelContext | undefined;
  private ended = false;

  constructor(
    private readonly run: RunRecord,
    recovered: boolean,
  ) {
    if (tracingOff()) return;
    this.span = startSafely(() =>
      trace.getTracer(TRACER).startSpan(
        `cairn.run ${run.workflow}`,
        {
          kind: SpanKind.CONSUMER,
          attributes: {
            "cairn.run.id": run.id,
            "cairn.workflow.name": run.workflow,
            "cairn.workflow.version": run.version,
            "cairn.run.epoch": run.epoch,
            "cairn.run.generation": run.generation,
            "cairn.run.recovered": recovered,
            ...(run.parentId !== null && { "cairn.run.parent_id": run.parentId }),
          },
        },
        parentOf(run.traceContext),
      ),
    );
    this.ctxMade = trace.setSpan(parentOf(run.traceContext), this.span);
  }

  /** The context the execution's work runs in: its span's, or (tracing off when it began, an
   *  SDK registered since) its run's start span's, as a no-op execution span would have. */
  private get ctx(): OtelContext {
    this.ctxMade ??= parentOf(this.run.traceContext);
    return this.ctxMade;
  }

  /** Runs `fn` (the workflow) with this execution's span active. */
  within<T>(fn: () => T): T {
    if (this.span === undefined) return fn();
    return context.with(this.ctx, fn);
  }

  /** The span of a step attempt; undefined while no SDK is registered (sdkTracer). */
  attempt(a: AttemptInfo): AttemptTrace | undefined {
    const tracer = sdkTracer();
    if (tracer === undefined) return undefined;
    let span: Span;
    try {
      span = tracer.startSpan(
        `cairn.step ${a.name}`,
        {
          attributes: {
            "cairn.run.id": this.run.id,
            "cairn.workflow.name": this.run.workflow,
            "cairn.workflow.version": this.run.version,
            "cairn.step.key": a.key,
            "cairn.step.name": a.name,
            "cairn.step.kind": a.kind,
            "cairn.step.attempt": a.attempt,
          },
        },
        this.ctx,
      );
    } catch {
      return undefined;
    }
    const ctx = trace.setSpan(this.ctx, span);
    let ended = false;
    return {
      run: (fn) => context.with(ctx, fn),
      end: ({ outcome, spend, error }) => {
        if (ended) return;
        ended = true;
        safely(() => {
          span.setAttributes({ "cairn.step.outcome": outcome, ...spendAttributes(spend) });
          if (error) recordError(span, error);
          span.end();
        });
      },
    };
  }

  /** Ends the execution: `outcome` is the status it released the run with, or "lease-lost",
   *  "handed-back", "interrupted". */
  end(outcome: string, error?: ErrorRecord | null): void {
    if (this.ended) return;
    this.ended = true;
    const span = this.span;
    if (span === undefined) return;
    safely(() => {
      span.setAttribute("cairn.run.outcome", outcome);
      if (error) recordError(span, error);
      span.end();
    });
  }
}
