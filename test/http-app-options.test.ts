// createHttpApp({ engine, tokn: "..." }) (a misspelt token) made an app with no token at
// all, and { basepath: "/cairn" } one at the root, silently; createHttpApp({}) (no engine)
// was accepted and every request then failed. Each is now a TypeError naming the option.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createHttpApp, serveHttp } from "../src/http/index.js";
import { createEngine, type Engine } from "../src/index.js";
import { sqliteStore } from "../src/sqlite.js";

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});
function client(): Engine {
  const dir = mkdtempSync(join(tmpdir(), "http-"));
  const e = createEngine({ store: sqliteStore(join(dir, "c.db")), worker: false });
  engines.push(e);
  return e;
}
const built = (o: Record<string, unknown>) => o as never;

describe("createHttpApp / serveHttp options", () => {
  it("a misspelt option is a TypeError naming it, and nothing is served", async () => {
    const engine = client();
    expect(() => createHttpApp(built({ engine, tokn: "a-long-token" }))).toThrow(
      new TypeError(
        'createHttpApp(): unknown option "tokn"; the options are engine, basePath, token, readToken, allowedHosts, allowedOrigins, allowUnauthenticated, maxBodyBytes, pollIntervalMs, clock, log, boundHosts',
      ),
    );
    expect(() => createHttpApp(built({ engine, basepath: "/cairn" }))).toThrow(
      /^createHttpApp\(\): unknown option "basepath"; the options are/,
    );
    await expect(serveHttp(built({ engine, port: 0, tokn: "a-long-token" }))).rejects.toThrow(
      /^serveHttp\(\): unknown option "tokn"; the options are engine, .*, log, port, host$/,
    );
  });

  it("no engine is a TypeError saying what to give", async () => {
    expect(() => createHttpApp(built({}))).toThrow(
      new TypeError(
        "createHttpApp(): engine must be an engine (createEngine({ store, worker: false }) is enough), got undefined",
      ),
    );
    await expect(serveHttp(built({ port: 0 }))).rejects.toThrow(
      /^serveHttp\(\): engine must be an engine/,
    );
  });

  it("the documented options serve, and serveHttp's port and host are not the app's", async () => {
    const engine = client();
    const app = createHttpApp({
      engine,
      basePath: "/cairn",
      token: "a-long-token",
      pollIntervalMs: 50,
    });
    const res = await app.fetch(
      new Request("http://127.0.0.1/cairn/api/runs", {
        headers: { authorization: "Bearer a-long-token" },
      }),
    );
    expect(res.status).toBe(200);
    app.close();
    const server = await serveHttp({ engine, port: 0, host: "127.0.0.1" });
    const r = await fetch(`${server.url}/api/runs/nope`);
    expect(r.status).toBe(404);
    await server.close();
  });
});
