// The internal engine option storeCloseMinMs, with which a test of a store whose close()
// never answers (test/close-always-ends-findings.test.ts) waits that out in less than the
// 10 s users get: users get 10 s as before, and a bad value is refused as the public numeric
// options are.

import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  type InternalEngineOptions,
  resolveEngineConfig,
  STORE_CLOSE_MIN_MS,
} from "../src/engine/engine-config.js";
import { createEngine, type Store, sqliteStore } from "../src/index.js";
import { tempDir } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

/** Options no store is opened for: a client (resolveEngineConfig opens nothing). */
const CLIENT = { store: {} as Store, worker: false };

describe("storeCloseMinMs (internal engine option)", () => {
  it("is 10 s unless given, and is refused when not a number >= 0", () => {
    expect(STORE_CLOSE_MIN_MS).toBe(10_000);
    expect(resolveEngineConfig(CLIENT).storeCloseMinMs).toBe(10_000);
    const opts = { ...CLIENT, storeCloseMinMs: 250 };
    expect(resolveEngineConfig(opts).storeCloseMinMs).toBe(250);
    for (const bad of [-1, Number.NaN, "1s"]) {
      expect(() => resolveEngineConfig({ ...CLIENT, storeCloseMinMs: bad as number })).toThrow(
        /storeCloseMinMs/,
      );
    }
  });

  it("is the least time close() waits for a store whose close() never answers", async () => {
    const t = tempDir("cairn-close-min-");
    const inner = sqliteStore(join(t.dir, "cairn.db"));
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === "close") return () => new Promise<never>(() => {});
        const value = Reflect.get(target, prop, receiver);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const logged: string[] = [];
    const options: InternalEngineOptions = {
      store,
      worker: false,
      closeGraceMs: 0,
      storeCloseMinMs: 50,
      log: (message) => logged.push(message),
    };
    const engine = createEngine(options);
    try {
      await engine.getRun("run_none"); // opens the store
      await within(engine.close(), 60_000, "close()");
      expect(logged).toContain(
        "close(): the store did not close within 50 ms; not waiting for it any longer",
      );
    } finally {
      await inner.close();
      t.cleanup();
    }
  });
});
