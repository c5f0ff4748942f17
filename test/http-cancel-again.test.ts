// The HTTP API's cancel, twice. `POST /api/runs/{id}/cancel` of a run canceled already (or
// whose cancel was requested already) answered 200 as if it had canceled it, and dropped a
// new reason without a word (the store keeps the first). It now answers as `cairn cancel`
// says it: 200 with `already: true` and a message saying when and with which reason the
// run was canceled (nothing changed), and a 409 CANCEL_REASON_NOT_RECORDED for a reason it
// did not record. The dashboard shows the message (a toast, or the dialog's error).

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp, type HttpServer, serveHttp } from "../src/http/index.js";
import { createEngine, type Engine, type Store, sqliteStore } from "../src/index.js";
import { hasChromium, launchBrowser } from "./helpers/browser.js";
import { call } from "./helpers/http.js";
import { tempDir } from "./helpers/sqlite.js";

const HOUR = 3_600_000;

type CancelAnswer = {
  run: { id: string; status: string; reason?: string };
  state: string;
  already: boolean;
  message: string;
  error?: { code: string; message: string };
};

describe("HTTP cancel of a run canceled (or asked to be) already", () => {
  const dir = tempDir("cairn-cancel-again-");
  const db = join(dir.dir, "cairn.db");
  let store: Store;
  let engine: Engine;
  let app: ReturnType<typeof createHttpApp>;
  const post = (id: string, body?: unknown) =>
    call<CancelAnswer>(
      (q) => app.fetch(q),
      "POST",
      `/api/runs/${id}/cancel`,
      body === undefined ? {} : { body },
    );

  beforeAll(async () => {
    store = sqliteStore(db);
    await store.open({ clock: { now: () => Date.now() } as never });
    const run = { workflow: "w", version: "1", input: "[null]", budgetLimit: {} };
    // r1 (and b1) execute on another worker: a cancel is only requested, for it to act on.
    for (const id of ["r1", "b1"]) {
      await store.createRun({ id, ...run });
      await store.claimRuns({ workerId: "wrk_other", workflows: ["w@1"], limit: 1, leaseMs: HOUR });
    }
    expect((await store.requestCancel("r1", "stop it")).state).toBe("requested");
    expect((await store.requestCancel("b1", "stop b1")).state).toBe("requested");
    await store.createRun({ id: "a1", ...run });
    expect((await store.requestCancel("a1", "first reason")).state).toBe("canceled");
    await store.createRun({ id: "n1", ...run });
    engine = createEngine({ store: sqliteStore(db), workflows: [], worker: false });
    app = createHttpApp({ engine });
  });
  afterAll(async () => {
    app?.close();
    await engine?.close();
    await store?.close();
    dir.cleanup();
  });

  it("a first cancel says it canceled the run (already false)", async () => {
    const res = await post("n1", { reason: "first of n1" });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ state: "canceled", already: false });
    expect(res.body.message).toBe('Canceled run "n1".');
  });

  it("a canceled run again, without a reason or with its own: 200, already canceled, nothing changed", async () => {
    for (const body of [undefined, { reason: "first reason" }]) {
      const res = await post("a1", body);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ state: "canceled", already: true });
      expect(res.body.run.reason).toBe("first reason");
      expect(res.body.message).toMatch(
        /^Run "a1" was already canceled at \d{4}-\d\d-\d\dT\S+Z \(reason "first reason"\); nothing changed\.$/,
      );
    }
  });

  it("a canceled run with another reason: 409 CANCEL_REASON_NOT_RECORDED, the first reason kept", async () => {
    const res = await post("a1", { reason: "another" });
    expect(res.status).toBe(409);
    expect(res.body.error?.code).toBe("CANCEL_REASON_NOT_RECORDED");
    expect(res.body.error?.message).toMatch(
      /^Run "a1" was already canceled at \S+Z \(reason "first reason"\); the reason "another" was not recorded \(a run keeps the reason it was first canceled with\)$/,
    );
    expect((await store.getRun("a1"))?.reason).toBe("first reason");
  });

  it("a run whose cancel was requested: the same, naming the worker it waits for", async () => {
    const again = await post("r1");
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ state: "requested", already: true });
    expect(again.body.message).toBe(
      'Cancel of run "r1" was already requested (reason "stop it"), waiting for worker "wrk_other" to stop it; nothing changed.',
    );
    const other = await post("r1", { reason: "another" });
    expect(other.status).toBe(409);
    expect(other.body.error?.code).toBe("CANCEL_REASON_NOT_RECORDED");
    expect(other.body.error?.message).toMatch(
      /^Cancel of run "r1" was already requested \(reason "stop it"\), waiting for worker "wrk_other" to stop it; the reason "another" was not recorded/,
    );
    expect((await store.getRun("r1"))?.reason).toBe("stop it");
  });

  it("another client's cancel landing between this request's read and its cancel: its reason is not reported recorded", async () => {
    // The request reads the run (not canceled yet), then cancels it; another client's cancel
    // comes in between (here: just before this engine's cancel). It answered 200 "Canceled
    // run" while the run kept the other client's reason and this one's was dropped.
    await store.createRun({
      id: "race1",
      workflow: "w",
      version: "1",
      input: "[null]",
      budgetLimit: {},
    });
    const cancel = engine.cancel.bind(engine);
    const raced = new Proxy(engine, {
      get(target, prop) {
        if (prop === "cancel") {
          return async (id: string, reason?: string) => {
            await store.requestCancel(id, "another client's reason");
            return cancel(id, reason);
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const racedApp = createHttpApp({ engine: raced });
    try {
      const res = await call<CancelAnswer>(
        (q) => racedApp.fetch(q),
        "POST",
        "/api/runs/race1/cancel",
        { body: { reason: "mine" } },
      );
      expect(res.status).toBe(409);
      expect(res.body.error?.code).toBe("CANCEL_REASON_NOT_RECORDED");
      expect(res.body.error?.message).toMatch(
        /^Run "race1" was already canceled at \S+Z \(reason "another client's reason"\); the reason "mine" was not recorded/,
      );
      expect((await store.getRun("race1"))?.reason).toBe("another client's reason");
    } finally {
      racedApp.close();
    }
  });

  it("the OpenAPI document says so: already and message in the 200, the code among the errors", async () => {
    const doc = await call<{
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
      components: { schemas: Record<string, unknown> };
    }>((q) => app.fetch(q), "GET", "/api/openapi.json");
    const ok = doc.body.paths["/api/runs/{id}/cancel"]?.post?.responses["200"] as {
      content: { "application/json": { schema: { required: string[] } } };
    };
    expect(ok.content["application/json"].schema.required).toEqual(
      expect.arrayContaining(["already", "message"]),
    );
    expect(JSON.stringify(doc.body.components.schemas.Error)).toContain(
      "CANCEL_REASON_NOT_RECORDED",
    );
  });

  it.runIf(hasChromium())(
    "the dashboard's cancel dialog says the cancel was requested already, and shows each answer's message",
    async () => {
      const server: HttpServer = await serveHttp({ engine, port: 0 });
      const browser = await launchBrowser();
      try {
        const page = await browser.context.newPage();
        await page.goto(`${server.url}/runs/b1`);
        await page.getByRole("button", { name: "Cancel run" }).click();
        const dialog = page.locator("#dialog-cancel");
        expect(await dialog.textContent()).toContain(
          "Its cancel was requested already (reason “stop b1”), waiting for its worker to stop it",
        );
        // Another reason: the dialog stays open with the API's words.
        await dialog.locator('input[name="body.reason"]').fill("another");
        await dialog.getByRole("button", { name: "Cancel run" }).click();
        const error = dialog.locator(".form-error");
        await error.waitFor({ state: "visible" });
        expect(await error.textContent()).toMatch(
          /^Cancel of run "b1" was already requested \(reason "stop b1"\), waiting for worker "wrk_other" to stop it; the reason "another" was not recorded/,
        );
        // No reason: done, and the toast says nothing changed (not "Done").
        await dialog.locator('input[name="body.reason"]').fill("");
        await dialog.getByRole("button", { name: "Cancel run" }).click();
        await dialog.waitFor({ state: "hidden" });
        const toast = page.locator("#toast");
        await toast.waitFor({ state: "visible" });
        expect(await toast.textContent()).toBe(
          'Cancel of run "b1" was already requested (reason "stop b1"), waiting for worker "wrk_other" to stop it; nothing changed.',
        );
      } finally {
        await browser.close();
        await server.close();
      }
    },
    60_000,
  );
});
