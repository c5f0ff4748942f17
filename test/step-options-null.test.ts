// A step's options checked by stepRules (context.ts) since c990a4a skip an absent estimate
// with `options.estimate === undefined`; an estimate of null (a JavaScript caller's "no
// estimate", `estimate: cond ? amounts : null`) then reaches Object.entries(null), and the
// step fails with "Cannot convert undefined or null to object", naming neither the step nor
// the field. Before, `Object.entries(options?.estimate ?? {})` read null as no estimate, as
// the attempt loop still does (`options?.estimate ?? {}`), and the step ran. Mended (`==
// null` in stepRules); `retry: null` (also a JavaScript caller's "none") still runs, checked
// beside it.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function stepWith(name: string, options: unknown): Promise<unknown> {
  const wf = workflow({ name, version: "1" }, async (ctx) =>
    ctx.step("a", () => 7, options as never),
  );
  const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
  cleanups.push(() => engine.close());
  const handle = await engine.start(wf, {});
  return handle.result().catch((err: unknown) => (err as Error).message);
}

describe("a step's options given null for none", () => {
  it("retry: null runs the step with the workflow's policy", async () => {
    expect(await stepWith("null-retry", { retry: null })).toBe(7);
  });

  it("estimate: null runs the step with no estimate", async () => {
    expect(await stepWith("null-estimate", { estimate: null })).toBe(7);
  });
});
