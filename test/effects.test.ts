// ctx.effect in process, on both backends: intent before perform, completion after, the
// history visible in getSteps, and reconcile consulted before retrying a perform that threw
// (the forge created the pull request but the response was lost).

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { type FakeForge, startFakeForge } from "../src/testing/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";

let forge: FakeForge;
beforeAll(async () => {
  forge = await startFakeForge();
});
afterAll(() => forge.close());

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  const openPr = workflow({ name: "open-pr", version: "1" }, async (ctx, title: string) => {
    const pr = await ctx.effect(
      "open-pr",
      {
        perform: (key) => forge.createPullRequest({ title, body: "fix", marker: key }),
        reconcile: (key) => forge.findPullRequestByMarker(key),
      },
      { retry: { initialDelay: 10, jitter: false } },
    );
    return pr.number;
  });

  it("records intent before perform and completion after, visible through getSteps", async () => {
    const h = harness();
    const e = h.engine([openPr]);
    const run = await e.start(openPr, `${backend}-a`);
    const n = await run.result();
    const [step] = await e.getSteps(run.id);
    expect(step?.kind).toBe("effect");
    expect(step?.status).toBe("completed");
    expect(step?.result).toMatchObject({ number: n, title: `${backend}-a` });
    expect(step?.intentAt).toBeInstanceOf(Date);
    expect(step!.intentAt!.getTime()).toBeLessThanOrEqual(step!.completedAt!.getTime());
    expect(forge.pulls().filter((p) => p.title === `${backend}-a`)).toHaveLength(1);
  });

  it("asks reconcile before retrying a perform that threw, and does not create twice", async () => {
    const h = harness();
    const e = h.engine([openPr]);
    forge.failNext(1, 502, { afterCreate: true }); // created, but the caller sees a 502
    const run = await e.start(openPr, `${backend}-b`);
    const n = await advanceUntil(h.clock, run.result(), 10);
    const mine = forge.pulls().filter((p) => p.title === `${backend}-b`);
    expect(mine).toHaveLength(1);
    expect(mine[0]?.number).toBe(n);
    const [step] = await e.getSteps(run.id);
    expect(step?.attempts.map((a) => a.error?.message ?? "ok")).toEqual([
      expect.stringContaining("502"),
      "ok",
    ]);
    const posts = forge.ledger.filter((x) => x.method === "POST" && x.marker === mine[0]?.marker);
    expect(posts).toHaveLength(1);
  });
});
