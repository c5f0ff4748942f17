// The runs list's "held" tag (a run released while a step body of it still ran in its
// worker) stayed after the hold had run out, until the page was reloaded: a hold that runs
// out changes nothing in the run, so no live update came, and the tag was drawn once, by the
// server's clock at render. The tag now carries its end and the page drops it then, as it
// keeps the ages current (held.ts, app.js).

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type HttpServer, serveHttp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { hasChromium, launchBrowser } from "./helpers/browser.js";
import { sharedHarness } from "./helpers/http.js";

const TOKEN = "browser-token-0123456789";
/** The hold: short, so that it runs out while the page stays open. */
const HOLD_MS = 1_500;

const wf = workflow({ name: "held-tag", version: "1" }, async (ctx) => ctx.step("s", () => 1));

describe.runIf(hasChromium())("dashboard: a run's held tag", () => {
  const h = sharedHarness("sqlite");
  let server: HttpServer;
  let browser: Awaited<ReturnType<typeof launchBrowser>>;

  beforeAll(async () => {
    const side = h.store();
    await side.open({ clock: h.clock });
    await side.createRun({
      id: "held-run",
      workflow: wf.name,
      version: wf.version,
      input: "[null]",
      budgetLimit: {},
    });
    const [claimed] = await side.claimRuns({
      workerId: "w1",
      workflows: [wf.id],
      limit: 1,
      leaseMs: 60_000,
    });
    const held = await side.releaseRun({
      runId: claimed!.run.id,
      epoch: claimed!.run.epoch,
      status: "pending",
      readyAt: await side.now(),
      heldFor: { workerId: "w1", ms: HOLD_MS },
    });
    expect(held.ok).toBe(true);
    await side.close();
    const engine = h.engine([wf], { worker: false });
    server = await serveHttp({ engine, port: 0, clock: h.clock, token: TOKEN });
    browser = await launchBrowser();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  it("goes once the hold has run out, without a reload", async () => {
    const page = await browser.context.newPage();
    await page.goto(`${server.url}/?token=${TOKEN}`);
    const tag = page.locator('tr[data-run="held-run"] .tag.held');
    await expect.poll(() => tag.count()).toBe(1);
    // The hold runs out HOLD_MS after the page's "now" (the server's clock): nothing in the
    // run changes, and the page is not reloaded.
    await expect.poll(() => tag.count(), { timeout: 15_000 }).toBe(0);
    expect(await page.locator('tr[data-run="held-run"]').count()).toBe(1);
    await page.close();
  });

  it("and the run's page says the hold ran out, without a reload", async () => {
    const page = await browser.context.newPage();
    await page.goto(`${server.url}/runs/held-run?token=${TOKEN}`);
    const dd = page.locator("#region-head dl.meta .held dd");
    const still = dd.locator("[data-held-until]");
    const ranOut = dd.locator("[data-held-after]:not([hidden])");
    await expect.poll(() => still.textContent()).toMatch(/still runs there/);
    expect(await ranOut.count()).toBe(0);
    await expect.poll(() => ranOut.count(), { timeout: 15_000 }).toBe(2);
    expect(await ranOut.first().textContent()).toMatch(/the hold ran out/);
    expect(await still.count()).toBe(0);
    await page.close();
  });
});
