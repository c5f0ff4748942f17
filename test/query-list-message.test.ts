// A bad value of a list query parameter (`?status=completed,bogus`) was refused as
// `query parameter "status"/1 must be one of: ...`: the JSON Pointer of a body's issues
// glued to the parameter's name. It now says which value, in words (route.ts, itemText),
// on the API and the dashboard's runs page alike; the issue's `path` in `issues` stays a
// pointer for programs.

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { call, sharedHarness } from "./helpers/http.js";

const wf = workflow({ name: "list", version: "1" }, async (ctx) => ctx.step("s", () => 1));
const STATUSES = "pending, running, waiting, paused, completed, failed, canceled";

describe("a bad value of a list query parameter", () => {
  const h = sharedHarness("sqlite");

  it("is named by its place in the list", async () => {
    const app = createHttpApp({ engine: h.engine([wf], { worker: false }), clock: h.clock });
    const fetch = (q: Request) => app.fetch(q);
    const cases: Array<[string, string]> = [
      ["bogus", "1st"],
      ["completed,bogus", "2nd"],
      ["completed,failed,bogus", "3rd"],
      [`${"completed,".repeat(10)}bogus`, "11th"],
      [`${"completed,".repeat(20)}bogus`, "21st"],
      [`${"failed,".repeat(111)}bogus`, "112th"],
    ];
    for (const [value, place] of cases) {
      const res = await call(fetch, "GET", `/api/runs?status=${value}`);
      expect(res.status, value).toBe(400);
      const error = res.body.error as { message: string; issues: Array<{ path: string }> };
      expect(error.message, value).toBe(
        `query parameter "status" (its ${place} value) must be one of: ${STATUSES}`,
      );
      expect(error.issues[0]?.path, value).toBe(`/${value.split(",").length - 1}`);
    }
    const page = await app.fetch(new Request("http://localhost/?status=completed,bogus"));
    expect(page.status).toBe(400);
    expect(await page.text()).toContain(
      "query parameter &quot;status&quot; (its 2nd value) must be one of",
    );
    // A value that is not a list keeps its plain wording.
    const limit = await call(fetch, "GET", "/api/runs?limit=0");
    expect(limit.status).toBe(400);
    expect((limit.body.error as { message: string }).message).toMatch(
      /^query parameter "limit" must be /,
    );
  });
});
