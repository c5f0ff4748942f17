// An approval link opened after its approval was answered (by it or otherwise) was headed
// as a question, "Reject “ship”?", over an "approved" badge, and said "Run "h1" asks": a
// reader could think the link still rejects. Such a page is now headed "This link to reject
// “ship” can no longer be used" and says the run asked (approval-page.ts); a pending
// approval's page still asks.

import { describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { sharedHarness } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

const KEYS = [{ id: "k1", secret: "secret-0123456789-0123456789-0123456789" }];

const wf = workflow({ name: "link-page", version: "1" }, async (ctx) =>
  ctx.approval("ship", { request: { what: "release 1" } }),
);

describe("approval link page", () => {
  const h = sharedHarness("sqlite");

  it("asks while the approval is pending, and says plainly once the link is dead", async () => {
    const worker = h.engine([wf], { approvalKeys: KEYS });
    await worker.start(wf, undefined, { id: "lp1" });
    await until(async () => (await worker.getRun("lp1"))?.status === "waiting", "lp1 waits");
    const links = await worker.approvalLinks("lp1", "ship", { baseUrl: "http://localhost" });
    const app = createHttpApp({ engine: worker, clock: h.clock });
    const page = async (url: string) => {
      const res = await app.fetch(new Request(url));
      expect(res.status).toBe(200);
      const text = await res.text();
      return { h1: /<h1>([^<]*)<\/h1>/.exec(text)?.[1], text };
    };

    const pending = await page(links.reject);
    expect(pending.h1).toBe("Reject “ship”?");
    expect(pending.text).toMatch(/asks\. This link works once/);

    await worker.approve("lp1", "ship", { by: "ops" });
    const dead = await page(links.reject);
    expect(dead.h1).toBe("This link to reject “ship” can no longer be used");
    expect(dead.text).toMatch(/class="id">lp1<\/a> asked\./);
    expect(dead.text).toContain("This approval was approved.");
  });
});
