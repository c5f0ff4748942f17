// The page an approval link opens, for an approval already answered, still said "deadline
// in 1d (then reject)" beside its "approved" badge: a deadline that no longer mattered, read
// as if the approval could still time out. The deadline now shows only while it matters:
// "times out in 1d (then reject)" for a pending approval; nothing once it is answered.

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { sharedHarness } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

const KEYS = [{ id: "k1", secret: "secret-0123456789-0123456789-0123456789" }];

const wf = workflow({ name: "deadline", version: "1" }, async (ctx) =>
  ctx.approval("ship", { request: { what: "release 1" }, timeout: "1d", onTimeout: "reject" }),
);

describe("approval link page: the deadline of an answered approval", () => {
  const h = sharedHarness("sqlite");

  it("says when a pending approval times out, and nothing of it once answered", async () => {
    const worker = h.engine([wf], { approvalKeys: KEYS });
    await worker.start(wf, undefined, { id: "dl1" });
    await until(async () => (await worker.getRun("dl1"))?.status === "waiting", "dl1 waits");
    const links = await worker.approvalLinks("dl1", "ship", { baseUrl: "http://localhost" });
    const app = createHttpApp({ engine: worker, clock: h.clock });
    const head = async () => {
      const res = await app.fetch(new Request(links.approve));
      expect(res.status).toBe(200);
      const text = await res.text();
      return /<div class="approval-head">([\s\S]*?)<\/div>/.exec(text)?.[1] ?? "";
    };

    expect(await head()).toMatch(/times out <time [^>]*>in 1d<\/time> \(then reject\)/);
    await worker.approve("dl1", "ship", { by: "ops" });
    const answered = await head();
    expect(answered).toContain("approved");
    expect(answered).not.toMatch(/deadline|times out|then reject/);
  });
});
