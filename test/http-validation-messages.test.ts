// The API's body and query checks said "must be string (got integer)", "must be object
// (got array)" and "must have at least 1 characters": a message a person reads to fix the
// request. They now read "must be a string (got an integer)", "must be an object (got an
// array)" and "must have at least 1 character" (schema.ts).

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { call, sharedHarness } from "./helpers/http.js";

const wf = workflow({ name: "messages", version: "1" }, async (ctx) =>
  ctx.approval("ship", { request: { what: "x" } }),
);

describe("HTTP validation messages", () => {
  const h = sharedHarness("sqlite");

  it("name the JSON type with its article, and count one character as one", async () => {
    const engine = h.engine([wf], { worker: false });
    const app = createHttpApp({ engine, clock: h.clock });
    const fetch = (q: Request) => app.fetch(q);
    await engine.start(wf, undefined, { id: "m1" });

    const array = await call(fetch, "POST", "/api/runs", { body: [] });
    expect(array.status).toBe(400);
    expect((array.body.error as { message: string }).message).toBe(
      "body must be an object (got an array)",
    );

    const reason = await call(fetch, "POST", "/api/runs/m1/cancel", { body: { reason: 5 } });
    expect(reason.status).toBe(400);
    expect((reason.body.error as { message: string }).message).toBe(
      "body/reason must be a string (got an integer)",
    );

    const by = await call(fetch, "POST", "/api/runs/m1/approvals/ship/reject", {
      body: { by: "" },
    });
    expect(by.status).toBe(400);
    expect((by.body.error as { message: string }).message).toBe(
      "body/by must have at least 1 character",
    );

    const usd = await call(fetch, "POST", "/api/runs/m1/resume", {
      body: { budget: { usd: "lots" } },
    });
    expect(usd.status).toBe(400);
    expect((usd.body.error as { message: string }).message).toBe(
      "body/budget/usd must be a number (got a string)",
    );
  });
});
