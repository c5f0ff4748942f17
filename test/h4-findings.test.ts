// Seeing and steering runs over HTTP and in the dashboard, as an operator (and an adversary)
// would: each test failed before its mend.

import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp, type HttpServer, serveHttp } from "../src/http/index.js";
import { type Engine, FatalError, workflow } from "../src/index.js";
import { hasChromium, launchBrowser } from "./helpers/browser.js";
import { useHarness } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

const TOKEN = "h4-token-h4-token-h4-token-0123";
const auth = { authorization: `Bearer ${TOKEN}` };

/** A parent waiting for "go-on" whose child "<parent>/k" failed; the parent is canceled when
 *  `cancelParent`. */
async function failedChildOf(e: Engine, parentId: string, cancelParent: boolean): Promise<string> {
  await e.start(PARENT, undefined, { id: parentId });
  const kid = `${parentId}/k`;
  await until(async () => {
    const [p, k] = [await e.getRun(parentId), await e.getRun(kid)];
    return p?.status === "waiting" && k?.status === "failed";
  }, `${parentId} waits, ${kid} failed`);
  if (cancelParent) await e.cancel(parentId, "operator stop");
  return kid;
}

const KID = workflow({ name: "h4-kid", version: "1" }, async (ctx) => {
  await ctx.step("work", () => {
    throw new FatalError("broken");
  });
});
const PARENT = workflow({ name: "h4-parent", version: "1" }, async (ctx) => {
  await ctx.child("k", KID, undefined).catch(() => undefined);
  await ctx.waitForEvent("go-on");
});

/** The <button>s of a run page's head, as `label[ disabled]`. */
function headButtons(page: string): string[] {
  const head = /<section data-region="head"[\s\S]*?<\/section>/.exec(page)?.[0] ?? "";
  return [...head.matchAll(/<button([^>]*)>([^<]*)<\/button>/g)].map(
    (m) => `${m[2]}${/\sdisabled/.test(m[1]!) ? " disabled" : ""}`,
  );
}

describe("run page actions match what the API accepts", () => {
  const harness = useHarness("sqlite");

  it("a failed child of a canceled parent is not offered Resume (disabled, with the reason)", async () => {
    const e = harness().engine([PARENT, KID]);
    const app = createHttpApp({ engine: e, token: TOKEN });
    const kid = await failedChildOf(e, "rp1", true);
    const page = await call(app.fetch, "GET", `/runs/${encodeURIComponent(kid)}`, {
      headers: auth,
    });
    expect(page.status).toBe(200);
    const html = page.body as unknown as string;
    expect(headButtons(html)).toContain("Resume disabled");
    expect(html).toContain("its parent run &quot;rp1&quot; was canceled");
    expect(html).not.toContain('id="dialog-resume"');
    // A failed child whose parent still runs resumes as before.
    const other = await failedChildOf(e, "rp2", false);
    const page2 = await call(app.fetch, "GET", `/runs/${encodeURIComponent(other)}`, {
      headers: auth,
    });
    expect(headButtons(page2.body as unknown as string)).toContain("Resume");
  });
});

describe.runIf(hasChromium())("run page actions in Chromium", () => {
  const harness = useHarness("sqlite");
  let browser: Awaited<ReturnType<typeof launchBrowser>>;
  const servers: HttpServer[] = [];
  beforeAll(async () => {
    browser = await launchBrowser();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    for (const s of servers) await s.close();
  });

  async function open(e: Engine, path: string): Promise<Page> {
    const server = await serveHttp({ engine: e, port: 0, token: TOKEN, pollIntervalMs: 50 });
    servers.push(server);
    const page = await browser.context.newPage();
    await page.goto(`${server.url}${path}?token=${TOKEN}`);
    return page;
  }

  it("a Resume pressed after the parent was canceled shows the API's 409 message in the dialog", async () => {
    const e = harness().engine([PARENT, KID]);
    const kid = await failedChildOf(e, "race1", false);
    const page = await open(e, `/runs/${encodeURIComponent(kid)}`);
    await page.getByRole("button", { name: "Resume" }).click();
    // Meanwhile, someone cancels the parent: the page still shows its Resume dialog.
    await e.cancel("race1", "operator stop");
    const dialog = page.locator("#dialog-resume");
    await dialog.getByRole("button", { name: "Resume" }).click();
    const alert = dialog.locator(".form-error");
    await alert.waitFor({ state: "visible" });
    expect(await alert.textContent()).toMatch(/parent run "race1" was canceled/);
    expect((await e.getRun(kid))?.status).toBe("failed");
    await page.close();
  });
});
