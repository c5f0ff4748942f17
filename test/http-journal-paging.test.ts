// GET /api/runs/{id}/steps and /events are paged: a run of thousands of steps (an agent's
// tool calls) or events answered all at once was megabytes per request.

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

const STEPS = 1_203;

const many = workflow({ name: "many-steps", version: "1" }, async (ctx) => {
  for (let i = 0; i < STEPS; i++) await ctx.step(`s${i}`, async () => i);
  await ctx.waitForEvent("go");
  return "done";
});

describe("paging a run's steps and events", () => {
  const harness = useHarness("sqlite");

  it("pages steps by call position and events by seq, each item exactly once", async () => {
    const h = harness();
    const e = h.engine([many]);
    await e.start(many, undefined, { id: "long" });
    await until(async () => (await e.getRun("long"))?.status === "waiting", "long waits");
    for (let i = 0; i < 7; i++) await e.sendEvent("long", `ev${i}`, i);
    const app = createHttpApp({ engine: e });
    try {
      const first = await call(app.fetch, "GET", "/api/runs/long/steps");
      expect(first.status).toBe(200);
      // The default page: 500 steps, and where the next begins.
      expect((first.body.steps as unknown[]).length).toBe(500);
      expect(first.body.next).toBe(500);

      const keys: string[] = [];
      let from: number | undefined = 0;
      let pages = 0;
      while (from !== undefined) {
        const page = await call(app.fetch, "GET", `/api/runs/long/steps?from=${from}&limit=400`);
        expect(page.status).toBe(200);
        keys.push(...(page.body.steps as Array<{ key: string }>).map((s) => s.key));
        from = page.body.next as number | undefined;
        pages++;
      }
      // 1,203 completed steps and the wait in progress, on four pages of at most 400.
      expect(pages).toBe(4);
      expect(keys).toEqual([...Array.from({ length: STEPS }, (_, i) => `s${i}`), "go"]);

      const seqs: number[] = [];
      const names: string[] = [];
      let after: number | undefined = 0;
      while (after !== undefined) {
        const page = await call(app.fetch, "GET", `/api/runs/long/events?after=${after}&limit=3`);
        expect(page.status).toBe(200);
        const events = page.body.events as Array<{ seq: number; name: string }>;
        expect(events.length).toBeLessThanOrEqual(3);
        seqs.push(...events.map((ev) => ev.seq));
        names.push(...events.map((ev) => ev.name));
        after = page.body.next as number | undefined;
      }
      expect(names).toEqual(["ev0", "ev1", "ev2", "ev3", "ev4", "ev5", "ev6"]);
      expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
      // The last page exactly full says no next: a client stops without an empty request.
      const all = await call(app.fetch, "GET", "/api/runs/long/events?limit=7");
      expect((all.body.events as unknown[]).length).toBe(7);
      expect(all.body.next).toBeUndefined();
      // Past every completed call: the last page, with the call in progress alone.
      const past = await call(app.fetch, "GET", `/api/runs/long/steps?from=${STEPS + 1}`);
      expect((past.body.steps as Array<{ key: string }>).map((s) => s.key)).toEqual(["go"]);
      expect(past.body.next).toBeUndefined();
    } finally {
      app.close();
    }
  });

  it("refuses a page size past the most, or a position that is not a whole number, naming the parameter", async () => {
    const h = harness();
    const e = h.engine([many]);
    const app = createHttpApp({ engine: e });
    try {
      for (const [path, name] of [
        ["/api/runs/x/steps?limit=1001", "limit"],
        ["/api/runs/x/steps?limit=0", "limit"],
        ["/api/runs/x/steps?from=-1", "from"],
        ["/api/runs/x/steps?from=1.5", "from"],
        ["/api/runs/x/events?limit=1001", "limit"],
        ["/api/runs/x/events?after=-1", "after"],
        ["/api/runs/x/events?after=abc", "after"],
      ] as const) {
        const res = await call(app.fetch, "GET", path);
        expect(res.status, path).toBe(400);
        const message = (res.body.error as { message: string }).message;
        expect(message, path).toContain(`query parameter "${name}" must be`);
      }
      // The former offset paging is refused, not ignored: a client looping on it would
      // otherwise read the first page forever.
      const old = await call(app.fetch, "GET", "/api/runs/x/steps?offset=500");
      expect(old.status).toBe(400);
      expect((old.body.error as { message: string }).message).toContain(
        'query parameter "offset" is no longer accepted',
      );
    } finally {
      app.close();
    }
  });
});
