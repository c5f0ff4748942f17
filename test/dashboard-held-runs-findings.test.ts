// the dashboard says that a run is held (released while a step body of it still ran in
// its worker: RunView's heldBy/heldUntil), in the runs list and on the run's page, the
// worker id (caller-chosen text) shown as text. Before, neither said so: a held run sat
// pending while other workers idled, and nothing on the page told why.

import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type HttpServer, serveHttp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { hasChromium, launchBrowser } from "./helpers/browser.js";
import { sharedHarness } from "./helpers/http.js";

const TOKEN = "browser-token-0123456789";
const LEASE_MS = 60_000;
/** A worker id as a caller may choose it: markup, a quote, an escape sequence. */
const WORKER = 'wrk_<img src=x onerror="window.pwned=1">\x1b[2J';

const wf = workflow({ name: "held-ui", version: "1" }, async (ctx) => ctx.step("s", () => 1));

describe.runIf(hasChromium())("dashboard: a held run", () => {
  const h = sharedHarness("sqlite");
  let server: HttpServer;
  let browser: Awaited<ReturnType<typeof launchBrowser>>;
  const problems: string[] = [];

  beforeAll(async () => {
    const side = h.store();
    await side.open({ clock: h.clock });
    for (const id of ["held-run", "plain-run"]) {
      await side.createRun({
        id,
        workflow: wf.name,
        version: wf.version,
        input: "[null]",
        budgetLimit: {},
      });
    }
    const [claimed] = await side.claimRuns({
      workerId: WORKER,
      workflows: [wf.id],
      limit: 1,
      leaseMs: LEASE_MS,
    });
    const held = await side.releaseRun({
      runId: claimed!.run.id,
      epoch: claimed!.run.epoch,
      status: "pending",
      readyAt: await side.now(),
      heldFor: { workerId: WORKER, ms: LEASE_MS },
    });
    expect(held.ok && held.run.id).toBe("held-run");
    await side.close();
    const engine = h.engine([wf], { worker: false });
    server = await serveHttp({ engine, port: 0, clock: h.clock, token: TOKEN });
    browser = await launchBrowser();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  async function open(path: string): Promise<Page> {
    const page = await browser.context.newPage();
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    await page.goto(`${server.url}${path}?token=${TOKEN}`);
    return page;
  }

  it("tags the held run in the list, naming its worker", async () => {
    const page = await open("/");
    const row = page.locator('tr[data-run="held-run"]');
    const tag = row.locator(".tag.held");
    await expect.poll(() => tag.textContent()).toBe("held");
    expect(await tag.getAttribute("title")).toContain(WORKER);
    expect(await page.locator('tr[data-run="plain-run"] .tag.held').count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as { pwned?: number }).pwned)).toBeUndefined();
  });

  it("says on the run's page which worker holds it and until when", async () => {
    const page = await open("/runs/held-run");
    const held = page.locator("#region-head dl.meta .held");
    await expect.poll(() => held.locator("dt").textContent()).toBe("Held by");
    expect(await held.locator("dd code").textContent()).toBe(WORKER);
    expect(await held.locator("dd time").getAttribute("datetime")).toMatch(/^\d{4}-/);
    expect(await page.locator("img").count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as { pwned?: number }).pwned)).toBeUndefined();
    const plain = await open("/runs/plain-run");
    await plain.locator("#region-head dl.meta").waitFor();
    expect(await plain.locator("#region-head dl.meta .held").count()).toBe(0);
    expect(problems).toEqual([]);
  });
});
