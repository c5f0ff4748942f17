// Runs whose execution (first or replay) begins while call-scope.ts's hook is off (a
// process idle over a second), begun from a timer, an immediate, a child process's 'exit',
// an HTTP request handler; parallel branches reuse names across awaits of different
// resource kinds, and a step body's ctx call after each kind must be refused.

import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { describe, expect, it } from "vitest";
import { type AnyWorkflow, type Engine, type WorkflowContext, workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import { scopeHook } from "../src/workflow/call-scope.js";
import { crashAfterRecordThenReplay, outcome } from "./helpers/crash-replay.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** Turns the hook off as late-work.ts's timer does (from a timer, not inside a promise job). */
const hookOff = () =>
  new Promise<void>((r) =>
    setTimeout(() => {
      scopeHook.disable();
      r();
    }, 0),
  );

const KINDS: Record<string, () => Promise<unknown>> = {
  immediate: () => new Promise((r) => setImmediate(r)),
  timer: () => new Promise((r) => setTimeout(r, 3)),
  tick: () => new Promise((r) => process.nextTick(r)),
  file: () => readFile(new URL(import.meta.url), "utf8"),
  micro: () => new Promise((r) => queueMicrotask(() => r(0))),
};

/** Each branch: "fetch" (a name all branches share, made before any work of their own),
 *  then its own name three times with work of one kind between: a name reused after own
 *  work is accepted only when the call tree shows the call continues from the earlier one
 *  (context.ts, beginCall), so a scope lost across that kind of work fails the run. */
function fanout(name: string, seenBodies: string[]) {
  return workflow({ name, version: "1" }, async (ctx: WorkflowContext) => {
    const out = await Promise.all(
      Object.entries(KINDS).map(async ([kind, wait]) => {
        const f = await ctx.step("fetch", () => `${kind}-0`);
        const a = await ctx.step(`s-${kind}`, () => `${kind}-1`);
        await wait();
        const b = await ctx.step(`s-${kind}`, () => `${kind}-2`);
        await wait();
        return ctx.step(`s-${kind}`, () => {
          seenBodies.push(kind);
          return `${f}/${a}/${b}`;
        });
      }),
    );
    await ctx.waitForEvent("go");
    return out;
  });
}

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  async function startFrom(e: Engine, wf: AnyWorkflow, via: string) {
    await hookOff();
    if (via === "timer")
      return new Promise<string>((r) =>
        setTimeout(() => r(e.start(wf, undefined).then((x) => x.id)), 1),
      );
    if (via === "immediate")
      return new Promise<string>((r) =>
        setImmediate(() => r(e.start(wf, undefined).then((x) => x.id))),
      );
    if (via === "child exit") {
      const child = spawn(process.execPath, ["-e", "0"]);
      return new Promise<string>((r) =>
        child.on("exit", () => r(e.start(wf, undefined).then((x) => x.id))),
      );
    }
    // An HTTP request handler.
    let id: Promise<string> | undefined;
    const server = createServer((_req, res) => {
      id = e.start(wf, undefined).then((x) => x.id);
      void id.then(() => res.end("ok"));
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const { port } = server.address() as { port: number };
    await hookOff();
    await (await fetch(`http://127.0.0.1:${port}/`)).text();
    server.close();
    return id!;
  }

  it.each(["timer", "immediate", "child exit", "http"])(
    "a run begun from a %s with the hook off reuses names per branch, and replays (hook off again) to the same result",
    async (via) => {
      const h = harness();
      const bodies: string[] = [];
      const wf = fanout(`fan-${via.replace(" ", "-")}`, bodies);
      const e = h.engine([wf]);
      const id = await startFrom(e, wf, via);
      await until(async () => (await e.getRun(id))?.status === "waiting", "the run waits");
      await hookOff();
      await e.sendEvent(id, "go");
      const want = Object.keys(KINDS).map((k) => `${k}-0/${k}-1/${k}-2`);
      expect(await e.handle(id).result()).toEqual(want);
      expect(bodies.sort()).toEqual(Object.keys(KINDS).sort());
    },
  );

  it.each(Object.keys(KINDS))(
    "a ctx call in a step body after a %s, the run begun with the hook off, is refused",
    async (kind) => {
      const h = harness();
      const wf = workflow({ name: `body-${kind}`, version: "1" }, async (ctx) =>
        ctx.step("outer", async () => {
          await KINDS[kind]!();
          await KINDS[kind]!();
          return ctx.step("inner", () => 1);
        }),
      );
      const e = h.engine([wf]);
      await hookOff();
      const err = await (await e.start(wf, undefined)).result().catch((x: unknown) => x);
      expect((err as Error).message).toMatch(
        /ctx\.step\("inner"\) was called inside the body of step "outer"/,
      );
    },
  );

  it("checkReplay (replay only), begun with the hook off, finds a fan-out run that reused names replays exactly", async () => {
    const h = harness();
    const bodies: string[] = [];
    const wf = fanout("fan-check", bodies);
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go");
    await run.result();
    await e.close();
    await hookOff();
    const [r] = await checkReplay({ store: h.store(), workflows: [wf], runIds: [run.id] });
    expect(r?.verdict, r?.detail).toBe("ok");
  });

  it("a fan-out whose worker dies mid-way replays on a new engine begun with the hook off, each branch's reused name given its own result", async () => {
    const h = harness();
    const { runId, replay } = await crashAfterRecordThenReplay(
      h,
      (c) =>
        workflow({ name: "fan-crash", version: "1" }, async (ctx: WorkflowContext) => {
          const out = await Promise.all(
            Object.entries(KINDS).map(async ([kind, wait], i) => {
              const a = await ctx.step(`s-${kind}`, () => `${kind}-1`);
              await wait();
              const b = await ctx.step(`s-${kind}`, () => `${kind}-2`);
              await wait();
              // The first execution's worker dies once the last branch reached here.
              if (c.firstRun && i === Object.keys(KINDS).length - 1) {
                await new Promise((r) => setTimeout(r, 30));
                c.crash();
              }
              return ctx.step(`t-${kind}`, () => `${a}/${b}`);
            }),
          );
          return out;
        }),
      { crashed: "the first worker dies" },
    );
    await hookOff();
    replay.handle(runId);
    const want = Object.keys(KINDS).map((k) => `${k}-1/${k}-2`);
    expect(await outcome(replay, runId)).toEqual(want);
  });
});
