// a wrong HTTP method on a path the app has routes for answered 404 "No API route", as
// if the path did not exist: it is a 405 with an Allow header naming the methods it takes
// (the API as JSON METHOD_NOT_ALLOWED, a dashboard page as a page). And serveHttp took its
// port unchecked: `port: "x"` listened on a socket file named x, NaN (an unset env var
// through Number()), a negative port or one past 65535 failed obscurely in listen(); each
// is refused when serveHttp is called, naming the option and the value.

import { existsSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { createHttpApp, serveHttp } from "../src/http/index.js";
import { createEngine, sqliteStore } from "../src/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const db = tempDbPath();
const engine = createEngine({ store: sqliteStore(db.path), worker: false });
afterAll(async () => {
  await engine.close();
  db.cleanup();
});

describe("a wrong method on a known path", () => {
  const app = createHttpApp({ engine });
  afterAll(() => app.close());
  const ask = (method: string, path: string) =>
    app.fetch(new Request(`http://127.0.0.1${path}`, { method, headers: { host: "127.0.0.1" } }));

  it("an API path is a 405 with Allow, not a 404", async () => {
    const res = await ask("DELETE", "/api/runs");
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD, POST");
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("METHOD_NOT_ALLOWED");
    expect(body.error.message).toContain('"/api/runs" takes GET, HEAD, POST');
  });

  it("a path with a parameter, and a GET-only one", async () => {
    const res = await ask("PUT", "/api/runs/r1");
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD");
  });

  it("a dashboard page is a 405 page with Allow", async () => {
    const res = await ask("DELETE", "/workers");
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD");
    expect(await res.text()).toContain("Method not allowed");
  });

  it("a path nothing has is still a 404, with no Allow", async () => {
    const res = await ask("GET", "/api/nothing-here");
    expect(res.status).toBe(404);
    expect(res.headers.get("allow")).toBeNull();
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("NOT_FOUND");
  });
});

describe("serveHttp's port", () => {
  it("refuses what is no TCP port, naming the option and the value, before listening", async () => {
    const cwd = process.cwd();
    for (const port of ["x", Number.NaN, -1, 65_536, 1.5, "4000"]) {
      await expect(serveHttp({ engine, port: port as number })).rejects.toThrow(
        /^serveHttp\(\): port must be a whole number from 0 to 65535/,
      );
    }
    await expect(serveHttp({ engine, port: "x" as unknown as number })).rejects.toThrow(/got "x"/);
    await expect(serveHttp({ engine, port: Number.NaN })).rejects.toThrow(/got NaN/);
    expect(existsSync(`${cwd}/x`)).toBe(false);
    const server = await serveHttp({ engine, port: 0 });
    expect(server.port).toBeGreaterThan(0);
    await server.close();
  });
});
