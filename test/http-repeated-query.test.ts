// A query parameter given twice (`?status=waiting&status=failed`, what a client generated
// from an OpenAPI array with its default `explode: true` sends) was read as its first value
// and the others dropped without a word: the runs list answered as if only "waiting" had
// been asked for (`{"runs": []}` while failed runs existed). It is now a 400 naming the
// parameter and, for a list, saying how to give it (route.ts, checkRepeats); on the API,
// its live stream and the dashboard's runs page alike.

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { call, sharedHarness } from "./helpers/http.js";

const wf = workflow({ name: "repeat", version: "1" }, async (ctx) => ctx.step("s", () => 1));
const other = workflow({ name: "other", version: "1" }, async (ctx) => ctx.step("s", () => 1));

describe("a repeated query parameter", () => {
  const h = sharedHarness("sqlite");

  it("is refused, naming it, instead of read as its first value", async () => {
    const engine = h.engine([wf, other], { worker: false });
    const app = createHttpApp({ engine, clock: h.clock });
    const fetch = (q: Request) => app.fetch(q);
    await engine.start(wf, undefined, { id: "r1" });
    await engine.start(other, undefined, { id: "o1" });

    const list = await call(fetch, "GET", "/api/runs?status=completed&status=pending");
    expect(list.status).toBe(400);
    expect((list.body.error as { code: string; message: string }).message).toBe(
      'query parameter "status" is given 2 times; give it once, its values separated by commas: "status=completed,pending". Nothing was done',
    );
    const limit = await call(fetch, "GET", "/api/runs?limit=1&limit=2");
    expect(limit.status).toBe(400);
    expect((limit.body.error as { message: string }).message).toBe(
      'query parameter "limit" is given 2 times; give it once. Nothing was done',
    );
    const live = await app.fetch(
      new Request("http://localhost/api/live/runs?status=completed&status=pending"),
    );
    expect(live.status).toBe(400);
    await live.body?.cancel();
    const page = await app.fetch(new Request("http://localhost/?status=completed&status=pending"));
    expect(page.status).toBe(400);
    expect(await page.text()).toContain("is given 2 times");

    // Given once, as before; an empty twin (a form's empty field) is no value, wherever it is.
    const one = await call<{ runs: Array<{ id: string }> }>(
      fetch,
      "GET",
      "/api/runs?status=completed,pending&workflow=&workflow=repeat",
    );
    expect(one.status).toBe(200);
    expect(one.body.runs.map((r) => r.id)).toEqual(["r1"]);
  });
});
