// Approvals in a real browser (headless Chromium, as test/http-browser.test.ts): find the
// run waiting for approval, read its request in the Approve dialog, approve it, and watch
// it complete without reloading; and open an approval link with no session at all, read
// the request, confirm, and see the link spent.

import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type HttpServer, serveHttp } from "../src/http/index.js";
import { type Engine, workflow } from "../src/index.js";
import { hasChromium, launchBrowser } from "./helpers/browser.js";
import { sharedHarness } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

const TOKEN = "browser-approvals-token-0123";
const KEYS = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];

describe.runIf(hasChromium())("approvals in Chromium", () => {
  const h = sharedHarness("sqlite");
  let worker: Engine;
  let client: Engine;
  let server: HttpServer;
  let browser: Awaited<ReturnType<typeof launchBrowser>>;
  const problems: string[] = [];

  const ship = workflow({ name: "ship", version: "1" }, async (ctx, input: { pr: number }) => {
    const answer = await ctx.approval("merge", {
      request: { summary: `Merge PR ${input.pr}`, diff: "-return 1;\n+return 2;" },
      timeout: "2d",
    });
    const merged = await ctx.step("merge", () =>
      answer.approved ? `merged #${input.pr}` : "skipped",
    );
    return { merged, by: answer.by, comment: answer.comment };
  });

  beforeAll(async () => {
    worker = h.engine([ship], { approvalKeys: KEYS });
    client = h.engine([ship], { worker: false, approvalKeys: KEYS });
    for (const pr of [1, 2]) await worker.start(ship, { pr }, { id: `ship-${pr}` });
    for (const pr of [1, 2]) {
      await until(async () => (await client.getRun(`ship-${pr}`))?.status === "waiting", "waits");
    }
    server = await serveHttp({
      engine: client,
      port: 0,
      clock: h.clock,
      pollIntervalMs: 50,
      token: TOKEN,
    });
    browser = await launchBrowser();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  function watch(page: Page): Page {
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => {
      if (m.type() === "error") problems.push(`console: ${m.text()}`);
    });
    return page;
  }

  const headStatus = (page: Page) => page.locator("#region-head .badge");

  it("approves a waiting run from the dashboard and watches it complete", async () => {
    const page = watch(await browser.context.newPage());
    await page.goto(`${server.url}/?token=${TOKEN}`);
    await page.getByRole("link", { name: /Waiting for approval/ }).click();
    await page.waitForURL(/view=waiting-approval/);
    const rows = page.locator("table.runs tbody tr");
    await expect.poll(() => rows.count()).toBe(2);
    await page.locator("table.runs").getByRole("link", { name: "ship-1" }).click();
    await page.waitForURL(/\/runs\/ship-1$/);
    await expect.poll(() => headStatus(page).textContent()).toBe("waiting");
    await page.locator("#live-status[data-state=live]").waitFor();

    await page.getByRole("button", { name: "Approve" }).click();
    const dialog = page.locator("#dialog-approve");
    await expect.poll(() => dialog.locator("dl.request").textContent()).toContain("Merge PR 1");
    expect(await dialog.locator("pre.value").last().textContent()).toBe("-return 1;\n+return 2;");
    await dialog.locator('input[name="body.by"]').fill("Browser Betty");
    await dialog.locator('textarea[name="body.comment"]').fill("ship it");
    await dialog.getByRole("button", { name: "Approve" }).click();
    await dialog.waitFor({ state: "hidden" });

    // The worker continues the run; the page follows it live.
    await headStatus(page).filter({ hasText: "completed" }).waitFor({ timeout: 30_000 });
    await expect.poll(() => page.locator("#region-io").textContent()).toContain("merged #1");
    expect(await page.locator("#region-io").textContent()).toContain("Browser Betty");
    expect(await page.locator("#region-steps").textContent()).toContain("approval");
    await page.close();
  });

  it("an approval link opens without a session, shows the request, answers once", async () => {
    const links = await client.approvalLinks("ship-2", "merge", {
      baseUrl: server.url,
      by: "Link Larry",
    });
    // A fresh browser: no cookie, no token. Only the link.
    const fresh = await launchBrowser();
    try {
      const page = watch(await fresh.context.newPage());
      await page.goto(links.approve);
      await expect.poll(() => page.locator("h1").textContent()).toContain("Approve");
      expect(await page.locator("dl.request").textContent()).toContain("Merge PR 2");
      expect((await client.listApprovals("ship-2"))[0]?.status).toBe("pending");
      await page.locator('textarea[name="body.comment"]').fill("approved from mail");
      await page.getByRole("button", { name: "Approve" }).click();
      await expect
        .poll(() => page.locator("#region-link").textContent(), { timeout: 20_000 })
        .toContain("This approval was approved through an approval link.");
      expect(await page.locator("form").count()).toBe(0);
      await until(async () => (await client.getRun("ship-2"))?.status === "completed", "done");
      expect((await client.getRun("ship-2"))?.output).toMatchObject({
        merged: "merged #2",
        by: "Link Larry",
        comment: "approved from mail",
      });
      // The reject link of the same approval is dead now.
      await page.goto(links.reject);
      expect(await page.locator("#region-link").textContent()).toContain("can no longer be used");
      await page.close();
    } finally {
      await fresh.close();
    }
  });

  it("logged no errors", () => {
    expect(problems).toEqual([]);
  });
});
