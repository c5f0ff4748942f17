// The OpenAPI document the API serves: every route the app answers is in it and nothing
// else is, and the answers of real calls — successes and errors — match the schemas it
// documents for their status. The schemas are checked by zod (from the document's JSON
// Schema), not by the server's own validator.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createHttpApp } from "../src/http/index.js";
import { advanceUntil } from "./helpers/engines.js";
import { call, sharedHarness } from "./helpers/http.js";
import { type Seeded, seedRuns } from "./helpers/runs-fixture.js";
import { until } from "./helpers/sqlite.js";

type Json = Record<string, unknown>;
interface Operation {
  operationId: string;
  parameters: Array<{ name: string; in: string; required: boolean; schema: Json }>;
  requestBody?: { content: Record<string, { schema: Json }> };
  responses: Record<string, { content?: Record<string, { schema?: Json }> }>;
}
type Doc = {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Json> };
};

describe("OpenAPI document", () => {
  const h = sharedHarness("sqlite");
  let seeded: Seeded;
  let app: ReturnType<typeof createHttpApp>;
  let doc: Doc;
  const checked = new Set<string>();

  beforeAll(async () => {
    seeded = await seedRuns(h);
    app = createHttpApp({ engine: seeded.client, clock: h.clock });
    const res = await call<Doc>(app.fetch, "GET", "/api/openapi.json");
    expect(res.status).toBe(200);
    doc = res.body;
  }, 120_000);
  afterAll(() => {
    app?.close();
    seeded?.releaseRunning();
  });

  /** zod for a schema of the document, its $refs pointing into the components. */
  function zodFor(schema: Json): z.ZodType {
    const text = JSON.stringify(schema).replaceAll('"#/components/schemas/', '"#/$defs/');
    const defs = JSON.parse(
      JSON.stringify(doc.components.schemas).replaceAll('"#/components/schemas/', '"#/$defs/'),
    );
    return z.fromJSONSchema({ ...JSON.parse(text), $defs: defs });
  }

  /** Calls the API and checks the answer against the document's schema for its status. */
  async function conforms(
    operationId: string,
    method: string,
    url: string,
    o: Parameters<typeof call>[3] = {},
  ): Promise<{ status: number; body: Json }> {
    const found = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.entries(ops)
        .filter(([, op]) => op.operationId === operationId)
        .map(([m, op]) => ({ path, method: m, op })),
    )[0];
    if (!found) throw new Error(`no operation ${operationId} in the document`);
    expect(found.method).toBe(method.toLowerCase());
    const res = await call<Json>(app.fetch, method, url, o);
    const documented = found.op.responses[String(res.status)];
    expect(
      documented,
      `${operationId} answered ${res.status}, which is not documented`,
    ).toBeDefined();
    const schema = documented?.content?.["application/json"]?.schema;
    expect(schema, `${operationId} ${res.status} has no JSON schema`).toBeDefined();
    const parsed = zodFor(schema!).safeParse(res.body);
    expect(
      parsed.success,
      `${operationId} ${res.status}: ${parsed.success ? "" : JSON.stringify(parsed.error.issues.slice(0, 5))}`,
    ).toBe(true);
    checked.add(`${operationId} ${res.status}`);
    return { status: res.status, body: res.body };
  }

  it("is OpenAPI 3.1 with unique operation ids and resolvable references", () => {
    expect(doc.openapi).toBe("3.1.0");
    const ops = Object.values(doc.paths).flatMap((p) => Object.values(p));
    const ids = ops.map((o) => o.operationId);
    expect(new Set(ids).size).toBe(ids.length);
    const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"([^"]+)"/g)].map((m) => m[1]!);
    expect(refs.length).toBeGreaterThan(10);
    for (const ref of refs) {
      expect(ref.startsWith("#/components/schemas/")).toBe(true);
      expect(doc.components.schemas[ref.slice("#/components/schemas/".length)], ref).toBeDefined();
    }
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const op of Object.values(item)) {
        const inPath = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
        expect(op.parameters.filter((p) => p.in === "path").map((p) => p.name)).toEqual(inPath);
        expect(op.responses["401"]).toBeDefined();
        // Every schema compiles.
        for (const r of Object.values(op.responses)) {
          const s = r.content?.["application/json"]?.schema;
          if (s) zodFor(s);
        }
      }
    }
  });

  it("documents exactly the routes the app serves", () => {
    const served = app.hono.routes
      .filter((r) => r.path.startsWith("/api/") && r.method !== "ALL")
      .map((r) => `${r.method} ${r.path.replace(/:(\w+)/g, "{$1}")}`)
      .sort();
    const documented = Object.entries(doc.paths)
      .flatMap(([path, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${path}`))
      .sort();
    expect(served).toEqual(documented);
    expect(served.length).toBeGreaterThanOrEqual(15);
  });

  it("answers the main routes as documented", async () => {
    const i = seeded.ids;
    await conforms("listRuns", "GET", "/api/runs");
    await conforms("listRuns", "GET", "/api/runs?limit=2");
    await conforms("listRuns", "GET", "/api/runs?status=nope");
    for (const id of Object.values(i)) {
      await conforms("getRun", "GET", `/api/runs/${encodeURIComponent(id)}`);
      await conforms("getSteps", "GET", `/api/runs/${encodeURIComponent(id)}/steps`);
      await conforms("listEvents", "GET", `/api/runs/${encodeURIComponent(id)}/events`);
    }
    await conforms("getRun", "GET", "/api/runs/nope");
    await conforms("listWorkflows", "GET", "/api/workflows");
    await conforms("listWorkers", "GET", "/api/workers");

    await conforms("startRun", "POST", "/api/runs", {
      body: { workflow: "deploy", input: { service: "doc" }, id: "deploy-doc" },
    });
    // The same id with the same input again: that run (200); another input would be a 409.
    await conforms("startRun", "POST", "/api/runs", {
      body: { workflow: "deploy", input: { service: "doc" }, id: "deploy-doc" },
    });
    await conforms("startRun", "POST", "/api/runs", { body: { workflow: "nope" } });
    await conforms("startRun", "POST", "/api/runs", {
      body: { workflow: "deploy", id: i.completed },
    });
    await conforms("startRun", "POST", "/api/runs", {
      raw: "{",
      headers: { "content-type": "application/json" },
    });
    await conforms("startRun", "POST", "/api/runs", {
      raw: "workflow=x",
      headers: { "content-type": "text/plain" },
    });

    await advanceUntil(
      h.clock,
      until(
        async () => (await seeded.client.getRun("deploy-doc"))?.status === "waiting",
        "deploy-doc waits",
      ),
      200,
    );
    const send = (key: string) =>
      conforms("sendEvent", "POST", "/api/runs/deploy-doc/events/approval", {
        body: { ok: true, by: "doc", at: new Date(0).toISOString() },
        headers: { "idempotency-key": key },
      });
    expect((await send("k")).status).toBe(201);
    expect((await send("k")).status).toBe(200);
    await conforms("sendEvent", "POST", `/api/runs/${i.completed}/events/late`, { body: 1 });
    await advanceUntil(
      h.clock,
      until(
        async () => (await seeded.client.getRun("deploy-doc"))?.status === "completed",
        "deploy-doc done",
      ),
      200,
    );
    await conforms("listEvents", "GET", "/api/runs/deploy-doc/events");
    await conforms("getSteps", "GET", "/api/runs/deploy-doc/steps");

    await conforms("cancelRun", "POST", `/api/runs/${i.sleeping}/cancel`, {
      body: { reason: "doc" },
    });
    await conforms("cancelRun", "POST", `/api/runs/${i.completed}/cancel`);
    // Canceled already: 200 (already) with the same reason, 409 with another.
    const again = await conforms("cancelRun", "POST", `/api/runs/${i.sleeping}/cancel`, {
      body: { reason: "doc" },
    });
    expect(again.body.already).toBe(true);
    const other = await conforms("cancelRun", "POST", `/api/runs/${i.sleeping}/cancel`, {
      body: { reason: "another" },
    });
    expect((other.body.error as { code: string }).code).toBe("CANCEL_REASON_NOT_RECORDED");
    await conforms("resumeRun", "POST", `/api/runs/${i.pausedBudget}/resume`, {
      body: { budget: { usd: 5 } },
    });
    await conforms("resumeRun", "POST", `/api/runs/${i.completed}/resume`);
    await conforms("forkRun", "POST", `/api/runs/${i.failed}/fork`, {
      body: { fromStep: "run-tests" },
    });
    await conforms("forkRun", "POST", `/api/runs/${i.failed}/fork`, { body: { fromStep: "nope" } });
    await conforms("forkRun", "POST", `/api/runs/${i.failed}/fork`, { body: {} });

    expect([...checked].sort()).toEqual(
      expect.arrayContaining([
        "listRuns 200",
        "listRuns 400",
        "getRun 200",
        "getRun 404",
        "getSteps 200",
        "listEvents 200",
        "listWorkflows 200",
        "listWorkers 200",
        "startRun 201",
        "startRun 200",
        "startRun 404",
        "startRun 409",
        "startRun 400",
        "startRun 415",
        "sendEvent 201",
        "sendEvent 200",
        "sendEvent 409",
        "cancelRun 200",
        "cancelRun 409",
        "resumeRun 200",
        "resumeRun 409",
        "forkRun 201",
        "forkRun 409",
        "forkRun 400",
      ]),
    );
  });

  it("documents each live stream as an event stream", async () => {
    for (const path of [
      "/api/live/runs",
      "/api/live/runs/{id}",
      "/api/live/workers",
      "/api/live/runs/{id}/stream",
    ]) {
      const op = doc.paths[path]?.get;
      expect(op?.responses["200"]?.content).toHaveProperty(["text/event-stream"]);
    }
  });
});
