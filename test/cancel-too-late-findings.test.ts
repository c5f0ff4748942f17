// A cancel of a run executing in another process is only requested: its worker stops the
// run when it hears of it. A worker that ends the run completed (or failed) before it heard
// canceled nothing. The HTTP API (and `cairn cancel`, through the same check) read the run
// afterwards and said "requested" (200, "the worker executing it stops it shortly") for a
// run that had completed: success for a cancel that did nothing. Now that is a 409 naming
// what the run did instead, as a cancel arriving a moment later gets.
//
// SQLite: the worker hears of another store instance's cancel only at its heartbeat, which
// the virtual clock never reaches here, so the run completes unaware, deterministically.

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Store, workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

describe("sqlite: a cancel its worker hears too late", () => {
  const harness = useHarness("sqlite");

  it("POST /cancel of a run that completed before its worker heard is a 409, not 'requested'", async () => {
    const h = harness();
    let open!: () => void;
    const gate = new Promise<void>((r) => {
      open = r;
    });
    let begun = false;
    const wf = workflow({ name: "late-cancel", version: "1" }, async (ctx) => {
      await ctx.step("s", async () => {
        begun = true;
        await gate;
      });
      return "done";
    });
    const w = h.engine([wf]);
    await w.start(wf, undefined, { id: "lc1" });
    await until(() => begun, "the step has begun");
    // The server's store: once the cancel is requested (the run executing on w), the step's
    // body ends and the run completes before the server reads it back.
    const inner = h.store();
    const store = new Proxy(inner, {
      get(t, prop, recv) {
        const v = Reflect.get(t, prop, recv);
        if (prop === "requestCancel") {
          return async (...args: unknown[]) => {
            const res = await (v as (...a: unknown[]) => Promise<{ state: string }>).apply(t, args);
            open();
            await until(
              async () => (await inner.getRun("lc1"))?.status === "completed",
              "the run completes",
            );
            return res;
          };
        }
        return typeof v === "function" ? v.bind(t) : v;
      },
    }) as Store;
    const server = createEngine({ store, workflows: [], clock: h.clock, worker: false });
    try {
      const app = createHttpApp({ engine: server, clock: h.clock });
      const res = await call((q) => app.fetch(q), "POST", "/api/runs/lc1/cancel", {
        body: { reason: "stop" },
      });
      expect({ status: res.status, body: res.body }).toEqual({
        status: 409,
        body: {
          error: {
            code: "RUN_CONFLICT",
            message:
              'Run "lc1" completed before its worker heard of the cancel; it was not canceled (a finished run cannot be canceled)',
          },
        },
      });
      expect((await w.getRun("lc1"))?.status).toBe("completed");
    } finally {
      await server.close();
    }
  });
});
