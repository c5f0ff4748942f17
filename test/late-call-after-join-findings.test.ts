// The late-call check (context.ts, beginCall: "cannot tell that this call always
// comes after") refused code whose replay is unambiguous: a name reused after a join
// (`await Promise.all(branches)`) and a non-durable await (generative seeds
// sk-sqlite:647618 and 647735). Code after the join continues from none of the branches'
// calls in the call tree, yet it always runs after every call the branches made before the
// join. The check now also lets a late call through when the code making it began its wait
// inside a cascade after the earlier call of the name was made (late-work.ts, places).

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { NonDeterminismError, workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(BACKENDS)("%s: late calls after a join", (backend) => {
  const harness = useHarness(backend);

  it("a name the joined branches used, reused after a timer and a file read of the workflow's own, runs and replays exactly after a crash", async () => {
    const h = harness();
    const bodies: string[] = [];
    let dStarts = 0;
    const wf = workflow({ name: "join-then-io", version: "1" }, async (ctx) => {
      const parts = await Promise.all(
        [
          { id: "A", ms: 30 },
          { id: "B", ms: 1 },
        ].map(async (it) => {
          const page = await ctx.step("fetch", async () => {
            bodies.push(`fetch ${it.id}`);
            await delay(it.ms);
            return `page-${it.id}`;
          });
          return ctx.step("summarize", () => {
            bodies.push(`summarize ${page}`);
            return `sum of ${page}`;
          });
        }),
      );
      const more: string[] = [];
      for (const it of ["C", "D"]) {
        // Non-durable waits of the workflow's own: every call below is made late.
        await delay(2);
        await readFile(new URL(import.meta.url));
        more.push(
          await ctx.step("summarize", async () => {
            bodies.push(`summarize ${it}`);
            if (it === "D" && ++dStarts === 1) await new Promise(() => {}); // the worker dies here
            return `sum of ${it}`;
          }),
        );
      }
      return [...parts, ...more];
    });
    const first = crashableEngine(h, [wf]);
    const run = await first.engine.start(wf, undefined);
    await until(() => dStarts === 1, "the last summarize runs");
    first.crash();
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    expect(await advanceUntil(h.clock, second.handle(run.id).result(), 30_000)).toEqual([
      "sum of page-A",
      "sum of page-B",
      "sum of C",
      "sum of D",
    ]);
    // Each call got its own record: nothing recorded ran again, and each key holds the
    // value of the call that made it.
    expect(bodies.filter((b) => b !== "summarize D").sort()).toEqual([
      "fetch A",
      "fetch B",
      "summarize C",
      "summarize page-A",
      "summarize page-B",
    ]);
    const steps = await second.getSteps(run.id);
    const resultAt = new Map(steps.map((s) => [s.key, s.result]));
    expect(resultAt.get("summarize#3")).toBe("sum of C");
    expect(resultAt.get("summarize#4")).toBe("sum of D");
    expect([resultAt.get("summarize"), resultAt.get("summarize#2")].sort()).toEqual([
      "sum of page-A",
      "sum of page-B",
    ]);
  });

  it("still refuses a late call whose wait began before the earlier call of the name was made", async () => {
    const h = harness();
    const wf = workflow({ name: "raced-reuse", version: "1" }, async (ctx) =>
      Promise.all([
        (async () => {
          await ctx.step("a", () => 1);
          // Made inside a cascade, but after the other branch began its wait: which of the
          // two "summarize" comes first is timing.
          return ctx.step("summarize", () => "x");
        })(),
        (async () => {
          await delay(40);
          return ctx.step("summarize", () => "y");
        })(),
      ]),
    );
    const e = h.engine([wf]);
    const err = await (await e.start(wf, undefined)).result().catch((x: unknown) => x);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toMatch(
      /calls step "summarize" again, and cairn cannot tell that this call always comes after the one keyed "summarize"/,
    );
  });

  it("still refuses it when the earlier call was made by code joined with a file read (its cascade is timing's)", async () => {
    const h = harness();
    const wf = workflow({ name: "joined-with-io", version: "1" }, async (ctx) =>
      Promise.all([
        (async () => {
          // The read is done before "a" is handed over here, so "summarize" is made in a's
          // cascade; when the read is slower (a replay), it is made later, after the read.
          // Its outcome comes after "b"'s (one handed over before "b" would order the two
          // in every execution: it is made before b's cascade, which the other call waits
          // from).
          await Promise.all([ctx.step("a", () => delay(30)), readFile(new URL(import.meta.url))]);
          return ctx.step("summarize", () => delay(300).then(() => "x"));
        })(),
        (async () => {
          await ctx.step("b", () => delay(80));
          await delay(5);
          return ctx.step("summarize", () => "y");
        })(),
      ]),
    );
    const e = h.engine([wf]);
    const err = await (await e.start(wf, undefined)).result().catch((x: unknown) => x);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toMatch(
      /calls step "summarize" again, and cairn cannot tell that this call always comes after the one keyed "summarize"/,
    );
  });
});
