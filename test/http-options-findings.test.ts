// createHttpApp's options that were taken unchecked: maxBodyBytes NaN (what
// `Number(process.env.X)` gives for a variable not set) made every request with a body a
// 500, 0 or a negative number refused every body as "larger than -1 bytes"; an allowed
// host written with a scheme or port, or an allowed origin with a path or a trailing slash,
// matched no request, so what it was meant to let through was refused (403) with nothing
// saying why. Each is now a TypeError naming the option when the app is made.

import { afterAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, sqliteStore } from "../src/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

describe("createHttpApp refuses options that cannot work", () => {
  const db = tempDbPath();
  const engine = createEngine({ store: sqliteStore(db.path), worker: false });
  afterAll(async () => {
    await engine.close();
    db.cleanup();
  });
  const token = "full-token-0123456789";

  it("maxBodyBytes must be a whole number of bytes >= 1", () => {
    for (const maxBodyBytes of [Number.NaN, 0, -1, 1.5, Number.POSITIVE_INFINITY, "10"]) {
      expect(() => createHttpApp({ engine, maxBodyBytes: maxBodyBytes as number })).toThrow(
        /^cairn http: maxBodyBytes must be a whole number of bytes >= 1/,
      );
    }
    createHttpApp({ engine, maxBodyBytes: 1 }).close();
  });

  it("an allowed host must be a host name alone", () => {
    for (const host of [
      "https://ops.example.com",
      "ops.example.com:8443",
      "ops.example.com/",
      "a b",
      "",
    ]) {
      expect(() => createHttpApp({ engine, token, allowedHosts: [host] })).toThrow(
        /^cairn http: allowed host .* is not a host name; give the name alone/,
      );
    }
    expect(() =>
      createHttpApp({ engine, token, allowedHosts: "ops.example.com" as unknown as string[] }),
    ).toThrow(/allowedHosts must be an array of strings/);
    createHttpApp({
      engine,
      token,
      allowedHosts: ["ops.example.com", "*", "10.0.0.1", "fe80::1", "[::1]"],
    }).close();
  });

  it("an allowed origin must be written as browsers send it, and says how", () => {
    expect(() => createHttpApp({ engine, allowedOrigins: ["https://ops.example.com/"] })).toThrow(
      /allowedOrigins entry "https:\/\/ops.example.com\/" is not an origin .*; write it as "https:\/\/ops.example.com"/,
    );
    for (const origin of [
      "https://ops.example.com/cairn",
      "ops.example.com",
      "null",
      "https://OPS.example.com",
    ]) {
      expect(() => createHttpApp({ engine, allowedOrigins: [origin] })).toThrow(
        /^cairn http: allowedOrigins entry/,
      );
    }
    createHttpApp({
      engine,
      allowedOrigins: ["https://ops.example.com", "http://localhost:3000"],
    }).close();
  });
});
