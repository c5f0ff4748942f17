// Found by an adversarial review of agent-sized runs at scale and huge values (poisoned runs
// among many, wide fan-outs and deep runs killed mid-way, limits at their exact boundary):
// each test is a bug it found, and failed before its mend.

import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  SerializationError,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { checkReplay, createVirtualClock } from "../src/testing/index.js";
import { advanceUntil, BACKENDS, type Backend, pgUrl, useHarness } from "./helpers/engines.js";
import { testSchema, withClient } from "./helpers/postgres.js";
import { tempDbPath } from "./helpers/sqlite.js";

/** A store on fresh storage, and a way to edit its rows behind its back. */
function rawStorage(backend: Backend): {
  store: () => Store;
  /** Runs `sql` (a table named as `{t}name`) with one text parameter. */
  damage: (sql: string, value: string) => Promise<void>;
  cleanup: () => Promise<void>;
} {
  if (backend === "sqlite") {
    const db = tempDbPath();
    return {
      store: () => sqliteStore(db.path),
      damage: async (sql, value) => {
        const raw = new Database(db.path);
        raw.prepare(sql.replaceAll("{t}", "").replace("$1", "?")).run(value);
        raw.close();
      },
      cleanup: async () => db.cleanup(),
    };
  }
  if (!pgUrl) throw new Error("postgres without a database");
  const url = pgUrl;
  const { schema, drop } = testSchema(url);
  return {
    store: () => postgresStore(url, { schema }),
    damage: (sql, value) =>
      withClient(url, async (c) => {
        await c.query(sql.replaceAll("{t}", `"${schema}".`), [value]);
      }),
    cleanup: drop,
  };
}

describe.each(BACKENDS)("a run holding a value the codec cannot decode (%s)", (backend) => {
  // A damaged row, or one written by a cairn that knows a type this one does not: the
  // worker handed the run back as if the store had failed ("it will resume"), claimed it
  // again at once and failed again, hundreds of times a second, for ever. A recorded
  // result that could not be decoded was handed to the workflow as the call's error.
  async function poisoned(sql: string, value: string) {
    const storage = rawStorage(backend);
    const clock = createVirtualClock();
    let bodies = 0;
    const wf = workflow({ name: "p", version: "1" }, async (ctx, i: number) => {
      const v = await ctx.step("s", () => {
        bodies++;
        return i;
      });
      await ctx.sleep("nap", 1000);
      return v;
    });
    const client = createEngine({ store: storage.store(), workflows: [wf], clock });
    await client.start(wf, 1, { id: "bad" });
    for (let i = 0; i < 300 && (await client.getRun("bad"))?.status !== "waiting"; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await client.close();
    await storage.damage(sql, value);
    const e = createEngine({
      store: storage.store(),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    try {
      await clock.advance(1000);
      await e.start(wf, 2, { id: "good" });
      for (let i = 0; i < 500 && (await e.getRun("good"))?.status !== "completed"; i++) {
        await clock.advance(1000);
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(await e.getRun("good")).toMatchObject({ status: "completed", output: 2 });
      for (let i = 0; i < 300 && (await e.getRun("bad"))?.status !== "paused"; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      const run = await e.getRun("bad");
      const claims = e.metrics().claimed;
      await new Promise((r) => setTimeout(r, 100));
      const store = storage.store();
      const [check] = await checkReplay({ store, workflows: [wf], runIds: ["bad"] });
      await store.close();
      return { run, claims, later: e.metrics().claimed, bodies, check };
    } finally {
      await e.close();
      await storage.cleanup();
    }
  }

  it("its input: the run is paused naming the run, not claimed again and again", async () => {
    const r = await poisoned("UPDATE {t}runs SET input = $1 WHERE id = 'bad'", '[{"x":1},"broken');
    expect(r.run?.status).toBe("paused");
    expect(r.run?.reason).toBe(
      'run "bad": its input cannot be decoded; it was damaged or written by another version of cairn: repair it and resume the run, or cancel it',
    );
    expect(r.later).toBe(r.claims);
    // The replay check reports it (it threw, and checked no other run).
    expect(r.check).toMatchObject({ verdict: "error", detail: "its input cannot be decoded" });
  });

  it("a recorded step result: paused naming the key, never an error handed to the workflow", async () => {
    const r = await poisoned(
      "UPDATE {t}steps SET result = $1 WHERE run_id = 'bad' AND key = 's'",
      "[{",
    );
    expect(r.run?.status).toBe("paused");
    expect(r.run?.reason).toMatch(/^run "bad": the recorded result of step "s" cannot be decoded;/);
    expect(r.later).toBe(r.claims);
    expect(r.bodies).toBe(2); // "bad" once, "good" once: the recorded step never ran again
    // The replay check cannot judge such a run: an error, not "ok".
    expect(r.check).toMatchObject({ verdict: "error" });
    expect(r.check?.detail).toMatch(/the recorded result of step "s" cannot be decoded/);
  });
});

describe.each(BACKENDS)("values that cannot be stored (%s)", (backend) => {
  const harness = useHarness(backend);

  // A value whose getter throws something that is not an Error (null, a string): the codec
  // read `.path` off what was thrown, and its own TypeError ("Cannot read properties of
  // null (reading 'path')") escaped: a step failed with it instead of a SerializationError
  // naming the step, and start, sendEvent and outputs said nothing of what was wrong.
  it("a getter throwing null is refused as unstorable, naming the call, and recorded", async () => {
    const h = harness();
    const poisoned = () => ({
      get x(): never {
        throw null;
      },
    });
    const seen: string[] = [];
    const wf = workflow({ name: "getter", version: "1" }, async (ctx) => {
      let m = "";
      try {
        await ctx.step("s", () => poisoned());
      } catch (e) {
        m = `${(e as Error).name}: ${(e as Error).message}`;
      }
      seen.push(m);
      await ctx.sleep("nap", 1000);
      return m;
    });
    const e = h.engine([wf]);
    const r = await e.start(wf, undefined, { id: "g" });
    const out = await advanceUntil(h.clock, r.result(), 1000, 100);
    expect(out).toBe(
      'SerializationError: Step "s" of run "g" returned a value that cannot be stored: reading .x threw null (a getter or a proxy); step results must be serializable (plain data, Date, Map, Set, BigInt, Uint8Array, Error) and within the payload limit',
    );
    expect(new Set(seen)).toEqual(new Set([out]));
    const [step] = await e.getSteps("g");
    expect(step).toMatchObject({
      key: "s",
      status: "failed",
      error: { name: "SerializationError" },
    });
    await expect(e.sendEvent("g", "x", poisoned())).rejects.toThrow(
      'Event "x" for run "g": the payload cannot be stored: reading .x threw null (a getter or a proxy); nothing was recorded',
    );
    await expect(e.start(wf, poisoned(), { id: "in" })).rejects.toThrow(
      'Input for workflow "getter@1" (run "in") cannot be stored: reading .x threw null',
    );
  });

  // The value of an effect comes from its perform or its reconcile; the error said
  // 'Step "pay" ... returned a value', for a call that is no step, whose side effect happened.
  it("an effect whose reconcile finds a value over the limit says so; perform is not called again", async () => {
    const h = harness();
    const charges: string[] = [];
    const wf = workflow({ name: "eff", version: "1" }, async (ctx) =>
      ctx.effect(
        "pay",
        {
          perform: (key) => {
            charges.push(key);
            if (charges.length === 1) throw new Error("connection reset after the charge");
            return { receipt: "ok" };
          },
          reconcile: (key) => (charges.includes(key) ? { receipt: "x".repeat(2000) } : undefined),
        },
        { retry: { initialDelay: 1, jitter: false } },
      ),
    );
    const e = h.engine([wf], { maxPayloadBytes: 1000 });
    const r = await e.start(wf, undefined, { id: "e" });
    const err = await advanceUntil(h.clock, r.result(), 1000, 100).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(SerializationError);
    expect((err as Error).message).toBe(
      'Effect "pay" of run "e": its reconcile returned a value that is 2018 bytes encoded, over the payload limit of 1000 bytes; effect results must be serializable (plain data, Date, Map, Set, BigInt, Uint8Array, Error) and within the payload limit',
    );
    expect(charges).toHaveLength(1);
  });
});
