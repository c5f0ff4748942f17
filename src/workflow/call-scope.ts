// Which call a piece of workflow code is continuing from: the causal tree of a run's calls.
//
// Every ctx call makes a node and moves the CURRENT synchronous flow into it
// (AsyncLocalStorage.enterWith). An `await` captures the flow's node, so the code after it
// resumes in the node of the last call made before the await, whatever settled the await
// and whenever: a branch of `items.map(async (it) => ...)` continues in its own chain of
// calls, a branch that awaited a file read resumes where it was. So "call A is an ancestor
// of call B" means B was made by code that had already made A, in every execution of a
// deterministic workflow: a fact of the program, not of timing.
//
// The replay core uses it for one rule: a name used again is numbered `name#n` in call
// order, which is only the same order on every replay when that order is fixed (see
// context.ts, beginCall). It also marks step bodies, where ctx calls are refused.
//
// The scope is carried as Node 20's AsyncLocalStorage carries its store (the same
// mechanism, kept here): each asynchronous resource, when created, takes the scope of the
// resource whose code creates it (executionAsyncResource), and code reads the scope of the
// resource it runs in. One async hook does it, and the same hook tells late-work.ts of each
// resource the workflow code creates: an AsyncLocalStorage beside it made two hooks, each
// looking up the current resource again, on every promise (about 35 a step, nearly all of
// them cairn's own). The hook is on while a run executes (scopeHook, late-work.ts).

import { createHook, executionAsyncResource } from "node:async_hooks";

/** One call in a run's causal tree. */
export interface CallNode {
  /** The execution (Context) the call belongs to. */
  readonly owner: object;
  readonly key: string;
  readonly parent: CallNode | undefined;
  readonly depth: number;
  /** Made outside any delivery's cascade (after non-durable async work). */
  readonly late: boolean;
  /** Its place in the execution's call order (Call.seq). */
  readonly seq: number;
  /** Made inside a cascade that continues no work of the workflow's own (a timer, a file
   *  read, joined with a cairn outcome): its place is the same in every execution. */
  readonly fixed: boolean;
  /** Made inside a cascade on a replay, matching a record its first run made inside one. */
  readonly replayedInCascade?: boolean;
  /** On a replay: the window (hand-overs made) of the cascade its first run made it in, when
   *  this replay makes it in that same window (inside the cascade, or late: code joined with
   *  work of the workflow's own that the replay found unfinished). LateCallCheck.recordedWindowOf. */
  readonly recordedWindow?: number;
  /** On a replay: made late while the hand-overs were held, taking a record made inside a
   *  cascade (HeldHandover.doubtfulCall): perhaps another call's of its name, come early. */
  readonly tookHeldRecord?: boolean;
  /** On a replay, made late while the hand-overs were held at this window for the record or
   *  begun call's intent it took (made inside that window's cascade): made before the next
   *  hand-over (LateCallCheck.madeAfter). */
  readonly heldWindow?: number;
}

interface RootScope {
  readonly owner: object;
  readonly root: true;
}

interface BodyScope {
  readonly owner: object;
  /** Key of the step (or effect) whose body is running. */
  readonly bodyOf: string;
}

type Scope = CallNode | RootScope | BodyScope;

const SCOPE = Symbol("cairn.scope");

/** An asynchronous resource (or the top-level one) carrying the scope it was created in. */
interface Carrier {
  [SCOPE]?: Scope | undefined;
}

function getScope(): Scope | undefined {
  return (executionAsyncResource() as Carrier)[SCOPE];
}

/** Runs `fn` in `scope`, then puts back the scope of the code that called it. */
function runIn<T>(scope: Scope | undefined, fn: () => T): T {
  const resource = executionAsyncResource() as Carrier;
  const before = resource[SCOPE];
  if (before === scope) return fn();
  resource[SCOPE] = scope;
  try {
    return fn();
  } finally {
    resource[SCOPE] = before;
  }
}

/** Told of each asynchronous resource created by a run's workflow code (not a step body):
 *  `from` is the resource whose code created it. */
export type WorkflowResourceListener = (
  owner: object,
  type: string,
  resource: object,
  from: object,
) => void;

let listener: WorkflowResourceListener | undefined;

/** Sets the one listener (late-work.ts) told of the workflow code's resources. */
export function onWorkflowResource(l: WorkflowResourceListener): void {
  listener = l;
}

/** The hook carrying scopes to new resources. late-work.ts enables it while a run executes
 *  (and a moment after), since turning promise hooks on and off has a cost of its own. */
export const scopeHook = createHook({
  init(_asyncId, type, _triggerAsyncId, resource) {
    const from = executionAsyncResource() as Carrier;
    const s = from[SCOPE];
    // A promise is a fresh object, which reads no scope already: most are cairn's own (no
    // scope), and a property added to each was a map transition and a property store per
    // promise, about 15 a step. Other resources may be reused (an HTTP parser is
    // initialized again): they are always written.
    if (s !== undefined || type !== "PROMISE") (resource as Carrier)[SCOPE] = s;
    if (s !== undefined && listener !== undefined && !("bodyOf" in s)) {
      listener(s.owner, type, resource as object, from);
    }
  },
});

/** Runs the workflow function at the root of `owner`'s call tree. */
export function runAtRoot<T>(owner: object, fn: () => T): T {
  return runIn({ owner, root: true }, fn);
}

/** Runs a step body: code in it (and everything it awaits) is inside that body. */
export function runInBody<T>(owner: object, key: string, fn: () => T): T {
  return runIn({ owner, bodyOf: key }, fn);
}

/** Where code calling into `owner` stands: the call it continues from (undefined at the
 *  root, or when called from outside the workflow's own flow), or the body it runs in. */
export function currentScope(owner: object): { node: CallNode | undefined; bodyOf?: string } {
  const s = scopeOf(owner);
  return typeof s === "string" ? { node: undefined, bodyOf: s } : { node: s };
}

/** currentScope without an object made for the answer (every call asks, context.ts): the
 *  call node, undefined, or the key of the step whose body is running (a string). */
export function scopeOf(owner: object): CallNode | string | undefined {
  const s = getScope();
  if (!s || s.owner !== owner || "root" in s) return undefined;
  return "bodyOf" in s ? s.bodyOf : s;
}

/** Runs cairn's own work (commits, timers, store reads) outside any workflow scope, so it
 *  is never mistaken for the workflow's own asynchronous work (late-work.ts). */
export function outsideWorkflow<T>(fn: () => T): T {
  // Only swaps the current resource's scope (no hook toggled): the code inside, and what
  // it starts, sees no scope.
  return runIn(undefined, fn);
}

/** The execution whose code is running now, if any: its workflow code, or a step body of
 *  it (bodyOfCurrentScope says which). Read only where a ctx is called by code outside its
 *  own run's flow (context.ts), so nothing is made per call. */
export function ownerOfCurrentScope(): object | undefined {
  return getScope()?.owner;
}

/** The key of the step whose body is running now (in whichever execution), if any. */
export function bodyOfCurrentScope(): string | undefined {
  const s = getScope();
  return s !== undefined && "bodyOf" in s ? s.bodyOf : undefined;
}

/** Moves the calling synchronous flow (and whatever it awaits next) into `node`. */
export function enterCall(node: CallNode): void {
  (executionAsyncResource() as Carrier)[SCOPE] = node;
}

/** True when `ancestor` is `node` or one of its ancestors. */
export function isAncestor(ancestor: CallNode, node: CallNode | undefined): boolean {
  for (let n = node; n !== undefined && n.depth >= ancestor.depth; n = n.parent) {
    if (n === ancestor) return true;
  }
  return false;
}

/** The calling flow's scope as an opaque value, for `reenterScope`. Test support: the
 *  generative test interprets a program's inline blocks with nested async functions, and
 *  re-enters the scope each block ended in, as the inline code's own `await` would. And
 *  cairn/ai (ai/conversation.ts): a model call whose prompt continues an earlier call's answer is
 *  made from that call's scope, which the AI SDK's own promise chain does not carry. */
export function captureScope(): unknown {
  return getScope();
}

/** Runs `fn` in a scope `captureScope` returned, leaving the calling flow's as it was:
 *  cairn/ai (ai/tools.ts) records a streamed loop's stop from the place of its tool call,
 *  from the listener of the signal that fired (in whatever flow fired it). */
export function runInScope<T>(scope: unknown, fn: () => T): T {
  return runIn(scope as Scope | undefined, fn);
}

/** Moves the calling flow into a scope `captureScope` returned (test support, see there). */
export function reenterScope(scope: unknown): void {
  if (scope !== undefined) (executionAsyncResource() as Carrier)[SCOPE] = scope as Scope;
}
