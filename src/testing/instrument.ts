// Wraps workflows so a test harness sees every step and effect function as it is about to
// run, without touching the user's code: each workflow is re-made with the same name,
// version and options around a context whose step() and effect() pass the harness a
// description of the call first. The engine resolves runs (children included) by
// name@version, so registering the wrapped copies is enough. The harness may throw there
// (an injected fault: the attempt fails as if the function had thrown) or never return
// (an in-process crash).

import type { Effect, StepContext, WorkflowContext } from "../workflow/context-types.js";
import { type AnyWorkflow, workflow } from "../workflow/define.js";
import type { Workspace } from "../workspace/types.js";

export interface CallInfo {
  runId: string;
  /** The call's key in the run's journal: its name, then `name#2`, `name#3`, ... */
  key: string;
  name: string;
  kind: "step" | "effect";
  /** 1-based position among the step and effect calls of this run, in call order. */
  index: number;
  /** The attempt about to run (1 for an effect's perform, which cairn does not retry by
   *  itself). */
  attempt: number;
}

export interface CallHooks {
  /** Runs right before a step function or an effect's perform. */
  beforeFunction?(call: CallInfo): void | Promise<void>;
  /** Runs the step function or perform itself (e.g. inside a scope of the harness's). */
  runBody?<T>(fn: () => T): T;
}

/** Names that share the run's key namespace (docs/API.md: step, effect, sleep, wait and
 *  child names share one namespace; approvals and workspaces are keyed the same way). */
const KEYED = new Set([
  "step",
  "effect",
  "sleep",
  "sleepUntil",
  "waitForEvent",
  "child",
  "approval",
  "workspace",
]);

function instrumentContext(ctx: WorkflowContext, hooks: CallHooks): WorkflowContext {
  const seen = new Map<string, number>();
  let index = 0;
  const keyOf = (name: string): string => {
    const n = (seen.get(name) ?? 0) + 1;
    seen.set(name, n);
    return n === 1 ? name : `${name}#${n}`;
  };
  return new Proxy(ctx, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof prop !== "string" || typeof value !== "function" || !KEYED.has(prop)) {
        return typeof value === "function" ? value.bind(target) : value;
      }
      if (prop === "step") {
        return <T>(name: string, fn: (s: StepContext) => Promise<T> | T, options?: unknown) => {
          const call = { runId: target.runId, key: keyOf(name), name, kind: "step" as const };
          const i = ++index;
          const wrapped = async (s: StepContext): Promise<T> => {
            await hooks.beforeFunction?.({ ...call, index: i, attempt: s.attempt });
            return hooks.runBody ? hooks.runBody(() => fn(s)) : fn(s);
          };
          return target.step(name, wrapped, options as never);
        };
      }
      if (prop === "effect") {
        return <T>(name: string, effect: Effect<T>, options?: unknown) => {
          const call = { runId: target.runId, key: keyOf(name), name, kind: "effect" as const };
          const i = ++index;
          const wrapped: Effect<T> = {
            ...effect,
            perform: async (...args: Parameters<Effect<T>["perform"]>) => {
              await hooks.beforeFunction?.({ ...call, index: i, attempt: 1 });
              return hooks.runBody
                ? hooks.runBody(() => effect.perform(...args))
                : effect.perform(...args);
            },
          };
          return target.effect(name, wrapped, options as never);
        };
      }
      if (prop === "workspace") {
        // The opening is a step keyed "workspace:<name>", and each ws.step a step of the
        // run made through the real context: both are step calls of the run (keys, call
        // numbers), and both functions pass the hooks as ctx.step's do.
        return async (name: string, ...rest: unknown[]) => {
          const key = `workspace:${name}`;
          const call = { runId: target.runId, key: keyOf(key), name: key, kind: "step" as const };
          const i = ++index;
          const ws = (await openThroughHooks(target, key, hooks, { ...call, index: i }, () =>
            (value as (...a: unknown[]) => Promise<Workspace>).call(target, name, ...rest),
          )) as Workspace;
          return new Proxy(ws, {
            get(w, p, r) {
              const v = Reflect.get(w, p, r);
              if (p !== "step" || typeof v !== "function") {
                return typeof v === "function" ? v.bind(w) : v;
              }
              return <T>(sname: string, fn: (s: StepContext) => Promise<T> | T, o?: unknown) => {
                if (typeof fn !== "function") return v.call(w, sname, fn, o);
                const call = {
                  runId: target.runId,
                  key: keyOf(sname),
                  name: sname,
                  kind: "step" as const,
                };
                const i = ++index;
                const wrapped = async (s: StepContext): Promise<T> => {
                  await hooks.beforeFunction?.({ ...call, index: i, attempt: s.attempt });
                  return hooks.runBody ? hooks.runBody(() => fn(s)) : fn(s);
                };
                return v.call(w, sname, wrapped, o);
              };
            },
          });
        };
      }
      return (name: string, ...rest: unknown[]) => {
        keyOf(name);
        return (value as (...a: unknown[]) => unknown).call(target, name, ...rest);
      };
    },
  });
}

/**
 * Opens a workspace with its opening step's function passing the hooks. The workspace
 * records its opening through the real context it was made with (workspace.ts: `ctx.step`
 * on the context's own API object, not on this proxy), called synchronously as
 * ctx.workspace() starts; so for that synchronous stretch only, the API object's `step`
 * wraps the function of the one step keyed `key` (any other call passes through), then is
 * put back. On a replay the step's function does not run, and neither do the hooks.
 */
function openThroughHooks<T>(
  target: WorkflowContext,
  key: string,
  hooks: CallHooks,
  call: Omit<CallInfo, "attempt">,
  open: () => Promise<T>,
): Promise<T> {
  const api = target as { step: WorkflowContext["step"] };
  const real = api.step;
  let wrapped = false;
  api.step = (<R>(name: string, fn: (s: StepContext) => Promise<R> | R, options?: unknown) => {
    if (wrapped || name !== key || typeof fn !== "function") {
      return real.call(target, name, fn, options as never);
    }
    wrapped = true;
    return real.call(
      target,
      name,
      async (s: StepContext): Promise<R> => {
        await hooks.beforeFunction?.({ ...call, attempt: s.attempt });
        return hooks.runBody ? hooks.runBody(() => fn(s)) : fn(s);
      },
      options as never,
    );
  }) as WorkflowContext["step"];
  try {
    return open();
  } finally {
    api.step = real;
  }
}

/** Copies of `workflows` (same name, version and options) whose contexts call `hooks`. */
export function instrumentWorkflows(workflows: AnyWorkflow[], hooks: CallHooks): AnyWorkflow[] {
  return workflows.map((wf) =>
    workflow(wf.options, (ctx: WorkflowContext, input: unknown) =>
      wf.fn(instrumentContext(ctx, hooks), input),
    ),
  );
}
