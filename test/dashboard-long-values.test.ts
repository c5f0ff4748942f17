// A run's page with a long event payload (a 1 MB string sent by a webhook) grew wider than
// the window: the events list is a grid whose one column took the width of the collapsed
// payload's one-line summary, so every event box and the page overflowed to the right
// (1,696 px wide in a 1,300 px window). The list's column may now shrink below its content
// (style.css), and the summary is cut with an ellipsis as the step values' are.
// On a phone's width (390 px) the runs list and the workers page were as wide as their
// tables (1,139 and 710 px): the whole page scrolled sideways, its header too. The tables
// now scroll inside their boxes.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type HttpServer, serveHttp } from "../src/http/index.js";
import { workflow } from "../src/index.js";
import { hasChromium, launchBrowser } from "./helpers/browser.js";
import { sharedHarness } from "./helpers/http.js";

const TOKEN = "browser-token-0123456789";
const LONG = "x".repeat(200_000);

const wf = workflow({ name: "long", version: "1" }, async (ctx) => {
  await ctx.step("long", () => LONG);
  return ctx.waitForEvent("never");
});

describe.runIf(hasChromium())("dashboard: long values", () => {
  const h = sharedHarness("sqlite");
  let server: HttpServer;
  let browser: Awaited<ReturnType<typeof launchBrowser>>;

  beforeAll(async () => {
    // A worker, so that the workers page has its table.
    const engine = h.engine([wf]);
    await engine.start(wf, undefined, { id: "long-run" });
    await engine.sendEvent("long-run", "webhook", LONG);
    await engine.sendEvent("long-run", "small", { ok: true });
    server = await serveHttp({ engine, port: 0, clock: h.clock, token: TOKEN });
    browser = await launchBrowser();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  it("keep a run's page within the window", async () => {
    const page = await browser.context.newPage();
    await page.goto(`${server.url}/runs/long-run?token=${TOKEN}`);
    await expect.poll(() => page.locator("ul.events > li").count()).toBe(2);
    // As one expression (the tests are type-checked without the DOM's types), polled: the live
    // feed may be re-rendering the events region at the moment of a single reading.
    const overflow = () =>
      page.evaluate<string>(`(() => {
        const doc = document.documentElement;
        const list = document.querySelector("ul.events")?.getBoundingClientRect();
        const panel = document.querySelector("#region-events")?.closest("section.panel")?.getBoundingClientRect();
        if (!list || !panel) return "events region not rendered";
        if (doc.scrollWidth > doc.clientWidth) return "page " + doc.scrollWidth + " px in a window of " + doc.clientWidth;
        if (list.right > panel.right + 0.5) return "events list ends at " + list.right + ", its panel at " + panel.right;
        return "fits";
      })()`);
    await expect.poll(overflow).toBe("fits");
    await page.close();
  });

  it("keep the runs list and the workers page within a phone's width", async () => {
    const page = await browser.context.newPage();
    await page.setViewportSize({ width: 390, height: 800 });
    for (const [path, table] of [
      ["/", "table.runs"],
      ["/workers", "table.workers"],
    ] as const) {
      await page.goto(`${server.url}${path}?token=${TOKEN}`);
      await expect.poll(() => page.locator(table).count()).toBe(1);
      // The table is wider than the window: it scrolls in its box.
      const widths = await page.evaluate<number[]>(
        `[...document.querySelectorAll("${table}")].map((t) => t.scrollWidth)`,
      );
      expect(widths[0], path).toBeGreaterThan(390);
      const pageWidth = await page.evaluate<number>("document.documentElement.scrollWidth");
      expect(pageWidth, path).toBeLessThanOrEqual(390);
    }
    await page.close();
  });
});
