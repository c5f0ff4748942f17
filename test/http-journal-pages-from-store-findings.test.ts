// A run's steps and events are read from the store a page at a time, by the HTTP API and
// by the dashboard: /steps and /events read the whole journal (every event) of the run for
// each page, and the run page of a 5,000-step run was megabytes of markup.

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { UI_STEPS_PAGE } from "../src/http/ui/run-page.js";
import { workflow } from "../src/index.js";
import type { Store } from "../src/store/store.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

/** `store`, remembering which verbs were called and how many records the reads returned. */
function watchedStore(store: Store, calls: string[]): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function" || typeof prop !== "string") return value;
      return (...args: unknown[]) => {
        calls.push(prop);
        return value.apply(target, args);
      };
    },
  });
}

/** A finished run of `n` recorded steps, written straight to the store (fast). */
async function recordedRun(store: Store, id: string, n: number): Promise<void> {
  await store.createRun({ id, workflow: "big", version: "1", input: "null", budgetLimit: {} });
  const [claimed] = await store.claimRuns({
    workerId: "w1",
    workflows: ["big@1"],
    limit: 1,
    leaseMs: 60_000,
  });
  if (!claimed) throw new Error("not claimed");
  for (let from = 0; from < n; from += 1_000) {
    const steps = Array.from({ length: Math.min(1_000, n - from) }, (_, i) => {
      const seq = from + i;
      return {
        runId: id,
        key: `tool-${seq}`,
        generation: 0,
        seq,
        name: `tool-${seq}`,
        kind: "step" as const,
        outcome: "ok" as const,
        delivery: seq,
        issuedAfter: seq,
        issuedLate: false,
        result: JSON.stringify({ answer: `result of call ${seq}`, tokens: seq }),
        error: null,
        spend: {},
        attempt: 1,
        startedAt: 1_000 + seq,
        completedAt: 1_001 + seq,
      };
    });
    const out = await store.appendRecords([{ runId: id, epoch: claimed.run.epoch, steps }]);
    expect(out).toEqual([{ ok: true }]);
  }
  const done = await store.releaseRun({
    runId: id,
    epoch: claimed.run.epoch,
    status: "completed",
    output: '"done"',
    readyAt: null,
  });
  expect(done.ok).toBe(true);
  await store.close();
}

const stepwise = workflow({ name: "stepwise", version: "1" }, async (ctx) => {
  for (let i = 0; i < 120; i++) await ctx.step(`s${i}`, async () => i);
  return "done";
});

describe.each(BACKENDS)("journal pages from the store (%s)", (backend) => {
  const harness = useHarness(backend);

  it("serves /steps and /events a page at a time, never reading the whole run", async () => {
    const h = harness();
    const writer = h.store();
    await writer.open({ clock: h.clock });
    await recordedRun(writer, "big", 2_500);
    const calls: string[] = [];
    const e = h.engine([], { worker: false, store: watchedStore(h.store(), calls) });
    for (let i = 0; i < 5; i++) {
      // Events to a finished run are refused: send them through the store's record.
      await expect(e.sendEvent("big", "late", i)).rejects.toThrow();
    }
    const app = createHttpApp({ engine: e });
    try {
      calls.length = 0;
      const keys: string[] = [];
      for (let from: number | undefined = 0, pages = 0; from !== undefined; pages++) {
        if (pages > 3) throw new Error("2,500 steps in pages of 1,000 took more than 3 pages");
        const page = await call(app.fetch, "GET", `/api/runs/big/steps?from=${from}&limit=1000`);
        expect(page.status).toBe(200);
        keys.push(...(page.body.steps as Array<{ key: string }>).map((s) => s.key));
        from = page.body.next as number | undefined;
      }
      expect(keys).toEqual(Array.from({ length: 2_500 }, (_, i) => `tool-${i}`));
      const events = await call(app.fetch, "GET", "/api/runs/big/events?limit=10");
      expect(events.body).toEqual({ events: [] });
      // Only the paged reads: no whole journal, no whole event list.
      expect(calls).not.toContain("loadJournal");
      expect(calls).not.toContain("listEvents");
      expect(calls).toContain("readJournalPage");
      expect(calls).toContain("readEvents");
      const missing = await call(app.fetch, "GET", "/api/runs/nope/steps");
      expect(missing.status).toBe(404);
      expect((await call(app.fetch, "GET", "/api/runs/nope/events")).status).toBe(404);
    } finally {
      app.close();
    }
  });

  it("pages steps and events with no gap and no repeat while the run appends", async () => {
    const h = harness();
    const e = h.engine([stepwise]);
    const listener = workflow({ name: "listener", version: "1" }, async (ctx) => {
      for (let i = 0; i < 40; i++) await ctx.waitForEvent(`e${i}`);
      return "heard";
    });
    const le = h.engine([listener]);
    await e.start(stepwise, undefined, { id: "busy" });
    await le.start(listener, undefined, { id: "ears" });
    const app = createHttpApp({ engine: e });
    try {
      // Steps: follow `next`; a last page read while the run still executes is read again
      // from its own `from`, its calls replacing what it showed before.
      const keys: string[] = [];
      let from = 0;
      let lastShown = 0;
      const deadline = Date.now() + 60_000;
      for (;;) {
        if (Date.now() > deadline) throw new Error("the run never finished");
        // Paced, so the run's worker gets its turns between the pages.
        await new Promise((resolve) => setTimeout(resolve, 5));
        const status = (await e.getRun("busy"))?.status;
        const page = await call(app.fetch, "GET", `/api/runs/busy/steps?from=${from}&limit=7`);
        const shown = (page.body.steps as Array<{ key: string; status: string }>)
          .filter((s) => s.status === "completed")
          .map((s) => s.key);
        keys.splice(keys.length - lastShown, lastShown, ...shown);
        const next = page.body.next as number | undefined;
        if (next !== undefined) {
          expect(shown.length).toBe(7);
          from = next;
          lastShown = 0;
        } else if (status === "completed") {
          break;
        } else {
          lastShown = shown.length;
        }
      }
      expect(keys).toEqual(Array.from({ length: 120 }, (_, i) => `s${i}`));

      // Events: sent while pages are read; each page goes on from the last seq it showed.
      const names: string[] = [];
      let after = 0;
      for (let i = 0; i < 40; i++) {
        await e.sendEvent("ears", `e${i}`, i);
        if (i % 3 === 0) {
          const page = await call(app.fetch, "GET", `/api/runs/ears/events?after=${after}&limit=2`);
          const got = page.body.events as Array<{ seq: number; name: string }>;
          names.push(...got.map((ev) => ev.name));
          after = got[got.length - 1]?.seq ?? after;
        }
      }
      for (let pages = 0; ; pages++) {
        if (pages > 40) throw new Error("40 events in pages of 2 never ended");
        const page = await call(app.fetch, "GET", `/api/runs/ears/events?after=${after}&limit=2`);
        const got = page.body.events as Array<{ seq: number; name: string }>;
        names.push(...got.map((ev) => ev.name));
        after = got[got.length - 1]?.seq ?? after;
        if (page.body.next === undefined) break;
      }
      expect(names).toEqual(Array.from({ length: 40 }, (_, i) => `e${i}`));
      await until(async () => (await le.getRun("ears"))?.status === "completed", "ears hears");
    } finally {
      app.close();
    }
  });

  it("draws the run page of a 5,000-step run small, its first steps with a link to the next", async () => {
    const h = harness();
    const writer = h.store();
    await writer.open({ clock: h.clock });
    await recordedRun(writer, "huge", 5_000);
    const e = h.engine([], { worker: false });
    const app = createHttpApp({ engine: e });
    try {
      const res = await app.fetch(new Request("http://localhost/runs/huge"));
      expect(res.status).toBe(200);
      const page = await res.text();
      // 5,000 steps drawn were about 6 MB.
      expect(page.length).toBeLessThan(400_000);
      expect(page).toContain(`data-key="tool-${UI_STEPS_PAGE - 1}"`);
      expect(page).not.toContain(`data-key="tool-${UI_STEPS_PAGE}"`);
      const next = /<a rel="next" href="([^"]+)#region-steps">/.exec(page)?.[1];
      expect(next).toBe(`/runs/huge?stepsFrom=${UI_STEPS_PAGE}`);
      const second = await (await app.fetch(new Request(`http://localhost${next}`))).text();
      expect(second).toContain(`data-key="tool-${UI_STEPS_PAGE}"`);
      expect(second).not.toContain(`data-key="tool-${UI_STEPS_PAGE - 1}"`);
      expect(second).toContain("First steps");
      // The last page: no link onwards.
      const last = await (
        await app.fetch(new Request(`http://localhost/runs/huge?stepsFrom=${5_000 - 10}`))
      ).text();
      expect(last).toContain('data-key="tool-4999"');
      expect(last).not.toContain('rel="next"');
      const bad = await app.fetch(new Request("http://localhost/runs/huge?stepsFrom=-3"));
      expect(bad.status).toBe(400);
      expect(await bad.text()).toContain("query parameter &quot;stepsFrom&quot; must be");
    } finally {
      app.close();
    }
  });

  it("says which verb a store written for an earlier cairn lacks", async () => {
    const h = harness();
    const old = new Proxy(h.store(), {
      get(target, prop, receiver) {
        if (prop === "readJournalPage" || prop === "readEvents") return undefined;
        const value = Reflect.get(target, prop, receiver);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const e = h.engine([], { worker: false, store: old });
    await expect(e.readSteps("any")).rejects.toThrow(
      "readSteps(): the store has no readJournalPage (a Store written for an earlier cairn)",
    );
    await expect(e.readEvents("any")).rejects.toThrow("readEvents(): the store has no readEvents");
  });

  it("draws a small run's page as before: every step, no pager", async () => {
    const h = harness();
    const writer = h.store();
    await writer.open({ clock: h.clock });
    await recordedRun(writer, "small", 12);
    const e = h.engine([], { worker: false });
    const app = createHttpApp({ engine: e });
    try {
      const page = await (await app.fetch(new Request("http://localhost/runs/small"))).text();
      for (let i = 0; i < 12; i++) expect(page).toContain(`data-key="tool-${i}"`);
      expect(page).not.toContain('class="pager"');
      expect(page).toContain("<dt>Steps</dt><dd>12</dd>");
    } finally {
      app.close();
    }
  });
});
