// Seeing and steering runs over HTTP and in the dashboard, as an operator (and an adversary)
// would: each test failed before its mend.

import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp, type HttpServer, serveHttp } from "../src/http/index.js";
import {
  createEngine,
  type Engine,
  encryptedStore,
  FatalError,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { hasChromium, launchBrowser } from "./helpers/browser.js";
import { cairn } from "./helpers/cli.js";
import { useHarness } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { tempDir, until } from "./helpers/sqlite.js";

const TOKEN = "dash-token-dash-token-dash-01234";
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

const KID = workflow({ name: "dash-kid", version: "1" }, async (ctx) => {
  await ctx.step("work", () => {
    throw new FatalError("broken");
  });
});
const PARENT = workflow({ name: "dash-parent", version: "1" }, async (ctx) => {
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

describe("run page approval actions", () => {
  const harness = useHarness("sqlite");

  it("an approval whose deadline passed while no worker woke the run is not offered (the API refuses it); the reason says so", async () => {
    const h = harness();
    const asks = workflow({ name: "dash-asks", version: "1" }, async (ctx) =>
      ctx.approval("merge", { request: "+fix", timeout: "1m", onTimeout: "reject" }),
    );
    const worker = h.engine([asks]);
    await worker.start(asks, undefined, { id: "a1" });
    await until(async () => (await worker.listApprovals("a1")).length === 1, "a1 asks");
    await worker.close(); // no worker wakes the run when its deadline passes
    const client = h.engine([], { worker: false });
    await h.clock.advance("2m");
    expect((await client.getRun("a1"))?.status).toBe("waiting");
    const app = createHttpApp({ engine: client, token: TOKEN });
    const page = await call(app.fetch, "GET", "/runs/a1", { headers: auth });
    const html = page.body as unknown as string;
    expect(headButtons(html)).toEqual(
      expect.arrayContaining(["Approve disabled", "Reject disabled"]),
    );
    expect(html).toContain("deadline passed");
    expect(html).not.toContain('id="dialog-approve"');
    const approved = await call(app.fetch, "POST", "/api/runs/a1/approvals/merge/approve", {
      headers: auth,
    });
    expect(approved.status).toBe(409);
    app.close();
  });
});

describe("an Idempotency-Key header that is not ASCII", () => {
  const harness = useHarness("sqlite");

  it("is a 400 naming the header, nothing stored: its bytes' text encoding is the sender's guess (UTF-8 bytes read as Latin-1 would be another key)", async () => {
    const h = harness();
    const waits = workflow({ name: "dash-keyed", version: "1" }, async (ctx) =>
      ctx.waitForEvent("hook"),
    );
    const e = h.engine([waits]);
    await e.start(waits, undefined, { id: "k1" });
    const app = createHttpApp({ engine: e, token: TOKEN });
    // What `curl -H 'Idempotency-Key: clé'` from a UTF-8 terminal arrives as.
    const utf8AsLatin1 = Buffer.from("clé", "utf8").toString("latin1");
    const sent = await call<{ error: { code: string; message: string } }>(
      app.fetch,
      "POST",
      "/api/runs/k1/events/hook",
      { headers: { ...auth, "idempotency-key": utf8AsLatin1 } },
    );
    expect(sent.status).toBe(400);
    expect(sent.body.error.message).toMatch(/header "idempotency-key" .*ASCII/);
    expect(await e.listEvents("k1")).toEqual([]);
    const ascii = await call(app.fetch, "POST", "/api/runs/k1/events/hook", {
      headers: { ...auth, "idempotency-key": "delivery-42" },
    });
    expect(ascii.status).toBe(201);
    app.close();
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

  it("a Send event with a key that is not ASCII says so in the dialog, not that the server is unreachable", async () => {
    const waits = workflow({ name: "dash-keyed-ui", version: "1" }, async (ctx) =>
      ctx.waitForEvent("hook"),
    );
    const e = harness().engine([waits]);
    await e.start(waits, undefined, { id: "ku" });
    await until(async () => (await e.getRun("ku"))?.status === "waiting", "ku waits");
    const page = await open(e, "/runs/ku");
    await page.getByRole("button", { name: "Send event" }).click();
    const dialog = page.locator("#dialog-event");
    await dialog.locator('input[name="header.idempotency-key"]').fill("clé-\u{1F600}");
    await dialog.getByRole("button", { name: "Send" }).click();
    const alert = dialog.locator(".form-error");
    await alert.waitFor({ state: "visible" });
    expect(await alert.textContent()).toMatch(/Idempotency key.*ASCII/);
    expect(await e.listEvents("ku")).toEqual([]);
    await page.close();
  });

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

describe("a withheld value and a user's string with its text", () => {
  const ENCRYPTED_TEXT = '[encrypted with key "k1"]';
  const echo = workflow({ name: "dash-echo", version: "1" }, async (ctx, input: unknown) => {
    await ctx.step("echo", () => input);
    return ctx.waitForEvent("done");
  });

  it("are told apart in the HTTP API's JSON and in the CLI's --json (withheld names the fields)", async () => {
    const t = tempDir("cairn-withheld-");
    const path = join(t.dir, "cairn.db");
    const k1 = { id: "k1", key: randomBytes(32).toString("base64") };
    // A client without keys starts one run: its input is the user's own string, in plain text
    // (before the store is marked encrypted: after, it would be refused).
    const keyless = createEngine({ store: sqliteStore(path), worker: false });
    await keyless.start(echo, ENCRYPTED_TEXT, { id: "plain" });
    const workers = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k1] }),
      workflows: [echo],
      pollIntervalMs: 10,
    });
    try {
      await workers.start(echo, { secret: "s" }, { id: "enc" });
      for (const id of ["enc", "plain"]) {
        await until(async () => (await workers.getRun(id))?.status === "waiting", `${id} waits`);
      }
      await workers.sendEvent("enc", "note", { card: "4111" });
      const app = createHttpApp({ engine: keyless, token: TOKEN });
      const get = (url: string) => call(app.fetch, "GET", url, { headers: auth });
      const enc = (await get("/api/runs/enc")).body.run as Record<string, unknown>;
      const plain = (await get("/api/runs/plain")).body.run as Record<string, unknown>;
      expect(enc.input).toBe(ENCRYPTED_TEXT);
      expect(plain.input).toBe(ENCRYPTED_TEXT);
      expect(enc.withheld).toEqual({ input: { reason: "encrypted", keyId: "k1" } });
      expect(plain.withheld).toBeUndefined();
      const steps = (await get("/api/runs/enc/steps")).body.steps as Array<Record<string, unknown>>;
      expect(steps.find((s) => s.key === "echo")?.withheld).toEqual({
        result: { reason: "encrypted", keyId: "k1" },
      });
      const events = (await get("/api/runs/enc/events")).body.events as Array<
        Record<string, unknown>
      >;
      expect(events[0]?.withheld).toEqual({ payload: { reason: "encrypted", keyId: "k1" } });
      const listed = (await get("/api/runs")).body.runs as Array<Record<string, unknown>>;
      expect(listed.every((r) => r.withheld === undefined)).toBe(true);

      // The CLI's --json says the same.
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const shown = async (id: string) => {
        const res = await cairn(["show", id, "--json"], env);
        expect(res.code, res.stderr).toBe(0);
        return JSON.parse(res.stdout) as {
          run: Record<string, unknown>;
          steps: Array<Record<string, unknown>>;
        };
      };
      const encShown = await shown("enc");
      const plainShown = await shown("plain");
      expect(encShown.run.input).toBe(ENCRYPTED_TEXT);
      expect(plainShown.run.input).toBe(ENCRYPTED_TEXT);
      expect(encShown.run.withheld).toEqual({ input: { reason: "encrypted", keyId: "k1" } });
      expect(plainShown.run.withheld).toBeUndefined();
      expect(encShown.steps.find((s) => s.key === "echo")?.withheld).toEqual({
        result: { reason: "encrypted", keyId: "k1" },
      });
    } finally {
      await keyless.close();
      await workers.close();
      t.cleanup();
    }
  });
});

/** `store`, counting the calls of its read verbs in `reads` while `counting.on`. */
function countingStore(store: Store, reads: Map<string, number>, counting: { on: boolean }): Store {
  const verbs = new Set(["getRun", "listRuns", "listApprovals", "listEvents", "loadJournal"]);
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if (counting.on && typeof prop === "string" && verbs.has(prop)) {
          reads.set(prop, (reads.get(prop) ?? 0) + 1);
        }
        return value.apply(target, args);
      };
    },
  });
}

describe("the event route of a server without encryption keys", () => {
  const harness = useHarness("sqlite");

  it("checks the run for encrypted payloads without reading the run twice (the newest runs hold it), its approvals read alongside", async () => {
    const h = harness();
    const waits = workflow({ name: "dash-waits", version: "1" }, async (ctx) =>
      ctx.waitForEvent("hook"),
    );
    const worker = h.engine([waits]);
    await worker.start(waits, undefined, { id: "w1" });
    await until(async () => (await worker.getRun("w1"))?.status === "waiting", "w1 waits");
    const reads = new Map<string, number>();
    const counting = { on: false };
    const client = h.engine([], {
      store: countingStore(h.store(), reads, counting),
      worker: false,
    });
    const app = createHttpApp({ engine: client, token: TOKEN });
    await client.getRun("w1"); // opened
    counting.on = true;
    const sent = await call(app.fetch, "POST", "/api/runs/w1/events/hook", {
      body: { n: 1 },
      headers: auth,
    });
    counting.on = false;
    expect(sent.status).toBe(201);
    // listApprovals reads the run too, for its approvals' status: that is the one getRun.
    expect(Object.fromEntries(reads)).toEqual({ listRuns: 1, listApprovals: 1, getRun: 1 });
  });
});

describe.runIf(hasChromium())('runs "." and ".." in the dashboard and the API', () => {
  const harness = useHarness("sqlite");
  let browser: Awaited<ReturnType<typeof launchBrowser>>;
  beforeAll(async () => {
    browser = await launchBrowser();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
  });

  it("are reached from the runs list by a click, live, and canceled from their page; the API names them %20. and %20..", async () => {
    const h = harness();
    const waits = workflow({ name: "dash-dots", version: "1" }, async (ctx) => {
      await ctx.step("first", () => 1);
      await ctx.waitForEvent("go");
    });
    const e = h.engine([waits]);
    const server = await serveHttp({ engine: e, port: 0, token: TOKEN, pollIntervalMs: 50 });
    try {
      await e.start(waits, undefined, { id: "." });
      // Started over HTTP too (this was refused: no URL could name it).
      const started = await call(fetch, "POST", `${server.url}/api/runs`, {
        body: { workflow: "dash-dots", id: ".." },
        headers: auth,
      });
      expect(started.status).toBe(201);
      for (const id of [".", ".."]) {
        await until(async () => (await e.getRun(id))?.status === "waiting", `${id} waits`);
        const read = await call(fetch, "GET", `${server.url}/api/runs/%20${id}`, { headers: auth });
        expect([id, read.status, (read.body.run as { id: string }).id]).toEqual([id, 200, id]);
      }
      const sent = await call(fetch, "POST", `${server.url}/api/runs/%20../events/go`, {
        headers: auth,
      });
      expect(sent.status).toBe(201);
      await until(async () => (await e.getRun(".."))?.status === "completed", ".. completes");

      const page = await browser.context.newPage();
      await page.goto(`${server.url}/?token=${TOKEN}`);
      await page.locator("table.runs a", { hasText: /^\.$/ }).click();
      await page.waitForURL(/\/runs\/%20\.$/);
      expect(await page.locator("h1.id").textContent()).toBe(".");
      await page.locator("#live-status[data-state=live]").waitFor();
      await page.getByRole("button", { name: "Cancel run" }).click();
      await page.locator("#dialog-cancel").getByRole("button", { name: "Cancel run" }).click();
      await page
        .locator("#region-head .badge")
        .filter({ hasText: "canceled" })
        .waitFor({ timeout: 20_000 });
      expect((await e.getRun("."))?.status).toBe("canceled");
      await page.goto(`${server.url}/`);
      await page.locator("table.runs a", { hasText: /^\.\.$/ }).click();
      await page.waitForURL(/\/runs\/%20\.\.$/);
      expect(await page.locator("h1.id").textContent()).toBe("..");
      await page.close();
    } finally {
      await server.close();
    }
  });
});

describe("the dashboard over a closed engine", () => {
  const harness = useHarness("sqlite");

  it("answers its pages 503 saying the engine is closed, as the API does, not 500 logged as unexpected", async () => {
    const h = harness();
    const one = workflow({ name: "dash-closed", version: "1" }, async (ctx) =>
      ctx.step("a", () => 1),
    );
    const e = h.engine([one]);
    const logged: string[] = [];
    const app = createHttpApp({ engine: e, log: (m) => logged.push(m) });
    await (await e.start(one, undefined, { id: "c1" })).result();
    await e.close();
    const api = await call(app.fetch, "GET", "/api/runs/c1");
    expect(api.status).toBe(503);
    for (const path of ["/", "/runs/c1", "/workers"]) {
      const page = await call(app.fetch, "GET", path);
      expect([path, page.status]).toEqual([path, 503]);
      expect(page.body as unknown as string).toContain("This engine is closed");
    }
    expect(logged.filter((m) => /unexpected/.test(m))).toEqual([]);
    app.close();
  });
});

describe("text cut to fit the dashboard", () => {
  const harness = useHarness("sqlite");

  it("is never cut between the two halves of an emoji (a U+FFFD on the page)", async () => {
    const h = harness();
    const emoji = "\u{1F600}";
    const wf = workflow({ name: "dash-emoji", version: "1" }, async (ctx) => {
      await ctx.step(emoji.repeat(100), () => emoji.repeat(300_000));
      return ctx.waitForEvent("go");
    });
    const e = h.engine([wf], { maxPayloadBytes: 4 * 1024 * 1024 });
    const id = emoji.repeat(128);
    await e.start(wf, undefined, { id });
    await until(async () => (await e.getRun(id))?.status === "waiting", "it waits");
    const app = createHttpApp({ engine: e });
    for (const path of ["/", `/runs/${encodeURIComponent(id)}`]) {
      const page = await call(app.fetch, "GET", path);
      expect(page.status).toBe(200);
      const text = page.body as unknown as string;
      expect(text).toContain(emoji);
      expect([path, text.includes("\uFFFD")]).toEqual([path, false]);
    }
    app.close();
  });
});

describe("a run page of many large values", () => {
  const harness = useHarness("sqlite");

  it("stays bounded: past 1 MB of shown values the rest are summarized and left to the API; the input first", async () => {
    const h = harness();
    const big = (c: string) => c.repeat(200_000);
    const wf = workflow({ name: "dash-big", version: "1" }, async (ctx, _input: string) => {
      for (let i = 0; i < 12; i++) await ctx.step(`s${i}`, () => big(String(i % 10)));
      return ctx.waitForEvent("go");
    });
    const e = h.engine([wf]);
    await e.start(wf, `${big("I")}INPUT-END`, { id: "big" });
    await until(async () => (await e.getRun("big"))?.status === "waiting", "big waits");
    for (let i = 0; i < 5; i++) await e.sendEvent("big", `ev${i}`, big("e"));
    const app = createHttpApp({ engine: e });
    const page = await call(app.fetch, "GET", "/runs/big");
    expect(page.status).toBe(200);
    const html = page.body as unknown as string;
    // 17 values of 200 KB: each would show 100 KB, 1.7 MB together.
    expect(html.length).toBeLessThan(1_300_000);
    expect(html).toContain("not shown here");
    // The input is shown before the steps spend the page's room.
    expect(html).toContain(`&quot;${"I".repeat(1000)}`);
    const steps = await call(app.fetch, "GET", "/api/runs/big/steps");
    expect((steps.body.steps as Array<{ result: string }>)[11]?.result).toBe(big("1"));
    app.close();
  });
});
