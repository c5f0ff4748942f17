// Findings on the codec and on values handed across steps and to children: what is stored
// of a value, and that the first run and every replay hand back the same value.

import { runInNewContext } from "node:vm";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { decode, type EncodeError, encode } from "../src/codec/codec.js";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import { useHarness } from "./helpers/engines.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const harness = useHarness("sqlite");

/** What a caller can see of a typed array or DataView. */
function shape(v: unknown) {
  if (!ArrayBuffer.isView(v)) return { type: typeof v };
  return {
    type: Object.prototype.toString.call(v),
    bytes: [...new Uint8Array(v.buffer, v.byteOffset, v.byteLength)],
    byteOffset: v.byteOffset,
    bufferBytes: v.buffer.byteLength,
  };
}

/** A standard schema that notes each value it is handed and passes it on. */
function noting<T>(seen: unknown[]) {
  return {
    "~standard": {
      version: 1 as const,
      vendor: "h1",
      validate: (value: unknown) => {
        seen.push(value);
        return { value: value as T };
      },
    },
  };
}

describe("codec: a typed array showing part of its buffer", () => {
  it("is stored with the bytes it shows, not its whole buffer", () => {
    const secret = Buffer.from("secret-token-0123456789");
    const shown = Buffer.from("hi!");
    // A zero-copy view of a small Buffer: its buffer is Node's shared pool.
    const view = new Uint8Array(shown.buffer, shown.byteOffset, shown.byteLength);
    const text = encode({ view });
    expect(text).not.toContain(Buffer.from(secret).toString("base64").slice(0, 8));
    const back = decode<{ view: Uint8Array }>(text);
    expect(shape(back.view)).toEqual({
      type: "[object Uint8Array]",
      bytes: [...Buffer.from("hi!")],
      byteOffset: 0,
      bufferBytes: 3,
    });
    // The pool is 8 KiB; the record is the size of the value.
    expect(text.length).toBeLessThan(100);
  });

  it("keeps each kind's values and length (subarrays of every typed array, DataView)", () => {
    const backing = new ArrayBuffer(64);
    new Uint8Array(backing).forEach((_, i, a) => {
      a[i] = i * 3;
    });
    const kinds = [
      new Int8Array(backing, 8, 4),
      new Uint8Array(backing, 8, 4),
      new Uint8ClampedArray(backing, 8, 4),
      new Int16Array(backing, 8, 4),
      new Uint16Array(backing, 8, 4),
      new Int32Array(backing, 8, 4),
      new Uint32Array(backing, 8, 4),
      new Float32Array(backing, 8, 4),
      new Float64Array(backing, 8, 4),
      new BigInt64Array(backing, 8, 4),
      new BigUint64Array(backing, 8, 4),
      new DataView(backing, 8, 5),
    ];
    for (const view of kinds) {
      const back = decode<ArrayBufferView>(encode(view));
      const s = shape(view);
      expect(shape(back)).toEqual({ ...s, byteOffset: 0, bufferBytes: view.byteLength });
      if (!(view instanceof DataView)) {
        expect([...(back as unknown as ArrayLike<unknown> & Iterable<unknown>)]).toEqual([
          ...(view as unknown as Iterable<unknown>),
        ]);
      }
    }
  });

  it("a view's own properties that say otherwise change nothing of the bytes stored", () => {
    const bytes = Uint8Array.from([1, 2, 3]);
    Object.defineProperty(bytes, "byteLength", { value: 1 });
    Object.defineProperty(bytes, "buffer", { value: new ArrayBuffer(100) });
    expect([...decode<Uint8Array>(encode(bytes))]).toEqual([1, 2, 3]);
  });

  it("a record written the old way (the whole buffer and an offset) decodes exactly as before", () => {
    // Stored text written by cairn before this change, for
    // { bytes: "secrethi!".subarray(6, 9), dv: DataView(buffer, 1, 2), words: Uint16Array(copy of 8 bytes, 2, 2) }
    const old =
      '[{"bytes":1,"dv":3,"words":4},["Uint8Array",2,6,3],["ArrayBuffer","c2VjcmV0aGkh"],["DataView",2,1,2],["Uint16Array",5,2,2],["ArrayBuffer","c2VjcmV0aGk="]]';
    const v = decode<{ bytes: Uint8Array; dv: DataView; words: Uint16Array }>(old);
    expect(shape(v.bytes)).toEqual({
      type: "[object Uint8Array]",
      bytes: [...Buffer.from("hi!")],
      byteOffset: 6,
      bufferBytes: 9,
    });
    expect(shape(v.dv)).toEqual({
      type: "[object DataView]",
      bytes: [...Buffer.from("ec")],
      byteOffset: 1,
      bufferBytes: 9,
    });
    expect(v.dv.buffer).toBe(v.bytes.buffer);
    expect(shape(v.words)).toMatchObject({ bytes: [...Buffer.from("cret")], byteOffset: 2 });
    expect(v.words.buffer.byteLength).toBe(8);
    // Two views of one buffer, written the old way: still one buffer.
    const aliased = decode<{ a: Uint8Array; b: Uint8Array }>(
      '[{"a":1,"b":3},["Uint8Array",2,0,4],["ArrayBuffer","AAECAwQFBgc="],["Uint8Array",2,2,4]]',
    );
    expect(aliased.a.buffer).toBe(aliased.b.buffer);
    expect([...aliased.b]).toEqual([2, 3, 4, 5]);
  });

  it("two views of one buffer in one value decode alike on every decode", () => {
    const whole = new Uint8Array(8).map((_, i) => i);
    const value = { a: whole.subarray(0, 4), b: whole.subarray(2, 6), all: whole };
    const text = encode(value);
    const one = decode<typeof value>(text);
    const two = decode<typeof value>(text);
    for (const v of [one, two]) {
      expect([...v.a]).toEqual([0, 1, 2, 3]);
      expect([...v.b]).toEqual([2, 3, 4, 5]);
      expect([...v.all]).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    }
    // Each part view is a copy of its own bytes: aliasing of part views is not kept.
    expect(one.a.buffer).not.toBe(one.b.buffer);
    // The same view object twice is one value.
    const same = decode<{ x: Uint8Array; y: Uint8Array }>(encode({ x: value.a, y: value.a }));
    expect(same.x).toBe(same.y);
  });

  it("a step's result: the first run and a replay in a new engine hand back the same view", async () => {
    const h = harness();
    const seen: unknown[] = [];
    const wf = workflow({ name: "h1-view-step", version: "1" }, async (ctx) => {
      const v = await ctx.step("bytes", async () => {
        const b = Buffer.from("pooled");
        return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
      });
      seen.push(shape(v));
      await ctx.waitForEvent("go");
      return shape(v);
    });
    const first = h.engine([wf]);
    await first.start(wf, undefined, { id: "view-step" });
    await until(async () => (await first.getRun("view-step"))?.status === "waiting", "waiting");
    await first.close();
    const second = h.engine([wf]);
    await second.sendEvent("view-step", "go", null);
    const out = await second.handle("view-step").result();
    expect(seen).toHaveLength(2);
    expect(seen[1]).toEqual(seen[0]);
    expect(out).toEqual(seen[0]);
    expect(seen[0]).toEqual({
      type: "[object Uint8Array]",
      bytes: [...Buffer.from("pooled")],
      byteOffset: 0,
      bufferBytes: 6,
    });
  });
});

describe("a child's input at its input schema", () => {
  it("a Buffer in the input reaches the schema as engine.start's does, and the body alike", async () => {
    const h = harness();
    const atSchema: unknown[] = [];
    const inBody: unknown[] = [];
    const kid = workflow(
      { name: "h1-buf-kid", version: "1", input: noting<{ b: Uint8Array }>(atSchema) },
      async (_ctx, i: { b: Uint8Array }) => {
        inBody.push(shape(i.b));
        return Buffer.isBuffer(i.b);
      },
    );
    const parent = workflow({ name: "h1-buf-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid, { b: Buffer.from("xyz") }),
    );
    const e = h.engine([parent, kid]);
    const started = await e.start(kid, { b: Buffer.from("xyz") }, { id: "direct" });
    const byChild = await e.start(parent, undefined, { id: "parent" });
    expect(await started.result()).toBe(await byChild.result());
    expect(atSchema).toHaveLength(2);
    const [direct, child] = atSchema.map((v) => (v as { b: unknown }).b);
    expect(shape(direct)).toEqual(shape(child));
    expect(Buffer.isBuffer(direct)).toBe(Buffer.isBuffer(child));
    // What the schema sees is what the run's function gets.
    expect(inBody[0]).toEqual(shape(direct));
    expect(inBody[1]).toEqual(shape(child));
  });
});

describe("checkReplay: the output of unchanged code", () => {
  it("an Error the workflow makes in its output is the same output (its stack names the caller)", async () => {
    const h = harness();
    const wf = workflow({ name: "h1-err-out", version: "1" }, async (ctx) => {
      const n = await ctx.step("n", async () => 1);
      return { n, note: new Error("why") };
    });
    const e = h.engine([wf]);
    await (await e.start(wf, undefined, { id: "err-out" })).result();
    const [res] = await checkReplay({ store: h.store(), workflows: [wf], runIds: ["err-out"] });
    expect(res?.verdict).toBe("ok");
    expect(res?.detail).toBe("replayed to completion");
  });

  it("a run recorded when a part view was stored with its whole buffer is the same output", async () => {
    const db = tempDbPath();
    try {
      const wf = workflow({ name: "h1-old-view", version: "1" }, async (ctx) => {
        const got = await ctx.step("bytes", async () =>
          Uint8Array.from(Buffer.from("secrethi!")).subarray(6, 9),
        );
        return { got };
      });
      const e = createEngine({ store: sqliteStore(db.path), workflows: [wf] });
      await (await e.start(wf, undefined, { id: "old-view" })).result();
      await e.close();
      // The records as a cairn before the change wrote them (the whole buffer, an offset).
      const raw = new Database(db.path);
      raw
        .prepare("UPDATE steps SET result = ? WHERE run_id = ? AND key = ?")
        .run('[["Uint8Array",1,6,3],["ArrayBuffer","c2VjcmV0aGkh"]]', "old-view", "bytes");
      raw
        .prepare("UPDATE runs SET output = ? WHERE id = ?")
        .run('[{"got":1},["Uint8Array",2,6,3],["ArrayBuffer","c2VjcmV0aGkh"]]', "old-view");
      raw.close();
      const [res] = await checkReplay({
        store: sqliteStore(db.path),
        workflows: [wf],
        runIds: ["old-view"],
      });
      expect(res?.verdict).toBe("ok");
      // A different output is still told apart.
      const other = workflow({ name: "h1-old-view", version: "1" }, async (ctx) => {
        const got = await ctx.step("bytes", async () => new Uint8Array(0));
        return { got: got.subarray(0, 2) };
      });
      const [diff] = await checkReplay({
        store: sqliteStore(db.path),
        workflows: [other],
        runIds: ["old-view"],
      });
      expect(diff?.verdict).toBe("diverged");
    } finally {
      db.cleanup();
    }
  });
});

describe("engine.start again with the same id and the same bytes", () => {
  it("a view of a small Buffer's bytes is the same input (the pool around it was compared too)", async () => {
    const h = harness();
    const wf = workflow(
      { name: "h1-restart-view", version: "1" },
      async (_ctx, i: { b: Uint8Array }) => Buffer.from(i.b).toString(),
    );
    const view = (text: string) => {
      const b = Buffer.from(text);
      return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    };
    const e = h.engine([wf]);
    const first = await e.start(wf, { b: view("same") }, { id: "restart" });
    expect(await first.result()).toBe("same");
    Buffer.from("the process made other bytes since");
    const again = await e.start(wf, { b: view("same") }, { id: "restart" });
    expect(again.id).toBe("restart");
    await expect(e.start(wf, { b: view("other") }, { id: "restart" })).rejects.toThrow(
      /already exists with a different input/,
    );
  });
});

describe("sendEvent again under the same idempotency key with the same bytes", () => {
  it("a view of a small Buffer's bytes is the same event, not a key reused for another", async () => {
    const h = harness();
    const wf = workflow({ name: "h1-resend-view", version: "1" }, async (ctx) => {
      const got = await ctx.waitForEvent("bytes");
      return got.timedOut ? "" : Buffer.from(got.payload as Uint8Array).toString();
    });
    const view = (text: string) => {
      const b = Buffer.from(text);
      return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    };
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "resend" });
    const first = await e.sendEvent("resend", "bytes", view("same"), { idempotencyKey: "k1" });
    Buffer.from("the process made other bytes since");
    const again = await e.sendEvent("resend", "bytes", view("same"), { idempotencyKey: "k1" });
    expect(first.duplicate).toBe(false);
    expect(again.duplicate).toBe(true);
    expect(await run.result()).toBe("same");
  });
});

describe("a value the codec refuses, in words a user acts on", () => {
  it("a class instance, a SharedArrayBuffer and a detached ArrayBuffer are named as such, with the step key", async () => {
    const h = harness();
    class Client {
      host = "db";
    }
    const detached = () => {
      const ab = new ArrayBuffer(4);
      structuredClone(ab, { transfer: [ab] });
      return ab;
    };
    const refused: Record<string, () => unknown> = {
      client: () => ({ conn: { client: new Client() } }),
      shared: () => ({ bytes: new Uint8Array(new SharedArrayBuffer(4)) }),
      detached: () => ({ bytes: detached() }),
    };
    const wf = workflow({ name: "h1-refused", version: "1" }, async (ctx) => {
      const out: Record<string, string> = {};
      for (const [key, value] of Object.entries(refused)) {
        try {
          await ctx.step(key, async () => value());
        } catch (err) {
          out[key] = `${(err as Error).name}: ${(err as Error).message}`;
        }
      }
      return out;
    });
    const e = h.engine([wf]);
    const out = (await (await e.start(wf, undefined, { id: "refused" })).result()) as Record<
      string,
      string
    >;
    expect(out.client).toMatch(
      /^SerializationError: Step "client" of run "refused" returned a value that cannot store an instance of class Client \(store its data as a plain object\) at \.conn\.client;/,
    );
    expect(out.shared).toMatch(
      /^SerializationError: Step "shared" of run "refused" returned a value that cannot store a SharedArrayBuffer \(copy its bytes into a Uint8Array\) at \.bytes;/,
    );
    expect(out.detached).toMatch(
      /^SerializationError: Step "detached" of run "refused" returned a value that cannot be stored: it holds a detached ArrayBuffer \(its memory was transferred\)/,
    );
    for (const text of Object.values(out)) {
      expect(text).not.toMatch(/POJO|a getter or a proxy/);
    }
  });
});

describe("codec: devalue's words for a refusal are not handed on", () => {
  it("a promise says to await it, an object with symbol keys says so", () => {
    const refusal = (value: unknown) => {
      try {
        encode(value);
      } catch (err) {
        return (err as Error).message;
      }
      return "stored";
    };
    expect(refusal({ pending: Promise.resolve(1) })).toBe(
      "cannot store a Promise or thenable (await it, and store what it resolves to) at .pending",
    );
    expect(refusal({ tagged: { [Symbol("id")]: 1 } })).toBe(
      "cannot store an object with symbol keys (symbols cannot be stored: use string keys) at .tagged",
    );
    for (const value of [{ p: Promise.resolve() }, { [Symbol("s")]: 1 }, new (class A {})()]) {
      expect(refusal(value)).not.toMatch(/POJO|stringifyAsync/);
    }
  });
});

describe("codec: a read that throws names where it is", () => {
  it("a getter or a proxy's trap deep in a value is named by its path", () => {
    const refusal = (value: unknown) => {
      try {
        encode(value);
      } catch (err) {
        return [(err as EncodeError).message, (err as EncodeError).path];
      }
      return ["stored"];
    };
    const expired = {
      get token(): string {
        throw new Error("expired");
      },
    };
    expect(refusal({ config: { retries: 3, auth: expired } })).toEqual([
      "cannot be stored: reading .config.auth.token threw Error: expired (a getter or a proxy)",
      ".config.auth.token",
    ]);
    expect(refusal({ list: [1, expired] })[1]).toBe(".list[1].token");
    expect(refusal(new Map([["k", expired]]))[1]).toBe('.get("k").token');
    const trap = new Proxy(
      {},
      {
        ownKeys() {
          throw null;
        },
      },
    );
    expect(refusal({ a: { b: trap } })).toEqual([
      "cannot be stored: reading .a.b threw null (a getter or a proxy)",
      ".a.b",
    ]);
    // At the top: "it", as before.
    expect(refusal(trap)).toEqual([
      "cannot be stored: reading it threw null (a getter or a proxy)",
      "(root)",
    ]);
  });
});

describe("codec: a value that only says it is a built-in (Symbol.toStringTag)", () => {
  // @js-temporal/polyfill's values say "Temporal.PlainDate" and so on: the codec stored them
  // as Temporal values, which only a global Temporal decodes. The step was recorded as
  // completed with a result no replay could read, and the run paused for good.
  it("a polyfill's Temporal value is refused naming the step, never recorded undecodable", async () => {
    const h = harness();
    class PlainDate {
      get [Symbol.toStringTag]() {
        return "Temporal.PlainDate";
      }
      toString() {
        return "2026-12-06";
      }
    }
    const seen: string[] = [];
    const wf = workflow({ name: "h1-temporal", version: "1" }, async (ctx) => {
      try {
        await ctx.step("due", async () => ({ due: new PlainDate() }));
      } catch (err) {
        seen.push(`${(err as Error).name}: ${(err as Error).message}`);
      }
      await ctx.waitForEvent("go");
      return seen.length;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "temporal" });
    const settled = await until(async () => {
      const status = (await e.getRun("temporal"))?.status;
      return status === "waiting" || status === "paused" || status === "failed"
        ? status
        : undefined;
    }, "settled");
    expect(settled).toBe("waiting");
    await e.sendEvent("temporal", "go", null);
    expect(await run.result()).toBe(2);
    expect(seen[0]).toMatch(
      /^SerializationError: Step "due" of run "temporal" returned a value that cannot store a Temporal\.PlainDate .*toString\(\).* at \.due;/,
    );
    expect(seen[1]).toBe(seen[0]);
  });

  it("a forged tag is not taken for the built-in; genuine built-ins are stored as before", () => {
    const kinds = [
      "Number",
      "String",
      "Boolean",
      "BigInt",
      "Date",
      "URL",
      "URLSearchParams",
      "RegExp",
      "Array",
      "Set",
      "Map",
      "Uint8Array",
      "Float64Array",
      "DataView",
      "ArrayBuffer",
      "Temporal.Instant",
    ];
    for (const kind of kinds) {
      class Pretender {
        buffer = new ArrayBuffer(2);
        byteLength = 2;
        get [Symbol.toStringTag]() {
          return kind;
        }
        valueOf() {
          return this;
        }
      }
      let stored: string | undefined;
      try {
        stored = encode({ v: new Pretender() });
      } catch (err) {
        expect((err as Error).message, kind).toMatch(
          /^cannot store (an instance of class Pretender|a Temporal)/,
        );
      }
      expect(stored, kind).toBeUndefined();
    }
    const genuine = {
      n: [Object(1), Object("s"), Object(true), Object(1n)],
      d: new Date(0),
      u: new URL("https://x.y/z"),
      q: new URLSearchParams("a=1"),
      r: /a+/g,
      s: new Set([1]),
      m: new Map([[1, 2]]),
      t: new Uint16Array([1, 2]),
      v: new DataView(new ArrayBuffer(2)),
      b: new ArrayBuffer(1),
      a: [1],
    };
    expect(encode(genuine)).toBe(
      '[{"n":1,"d":10,"u":11,"q":12,"r":13,"s":14,"m":15,"t":17,"v":19,"b":21,"a":22},[2,4,6,8],["Object",3],1,["Object",5],"s",["Object",7],true,["Object",9],["BigInt","1"],["Date","1970-01-01T00:00:00.000Z"],["URL","https://x.y/z"],["URLSearchParams","a=1"],["RegExp","a+","g"],["Set",3],["Map",3,16],2,["Uint16Array",18],["ArrayBuffer","AQACAA=="],["DataView",20],["ArrayBuffer","AAA="],["ArrayBuffer","AA=="],[3]]',
    );
  });
});

describe("codec: an Error made in another realm (node:vm, a sandbox an agent's code runs in)", () => {
  it("is stored as an Error is, as its Date and Map beside it are", async () => {
    const h = harness();
    const seen: unknown[] = [];
    const wf = workflow({ name: "h1-realm-error", version: "1" }, async (ctx) => {
      const v = await ctx.step("sandboxed", async () =>
        runInNewContext(
          '({ when: new Date(0), err: new TypeError("sandboxed"), tags: new Map([[1, 2]]) })',
        ),
      );
      const { err } = v as { err: Error };
      seen.push([err instanceof Error, err.name, err.message]);
      await ctx.waitForEvent("go");
      return seen.length;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "realm" });
    const settled = await until(async () => {
      const status = (await e.getRun("realm"))?.status;
      return status === "waiting" || status === "failed" ? status : undefined;
    }, "waiting or failed");
    expect(settled).toBe("waiting");
    await e.sendEvent("realm", "go", null);
    expect(await run.result()).toBe(2);
    expect(seen[0]).toEqual([true, "TypeError", "sandboxed"]);
    expect(seen[1]).toEqual(seen[0]);
  });

  it("thrown by a step, is recorded with its name, message and code, as this realm's", async () => {
    const h = harness();
    const seen: unknown[] = [];
    const wf = workflow({ name: "h1-realm-throw", version: "1" }, async (ctx) => {
      try {
        await ctx.step(
          "sandboxed",
          async () => {
            throw runInNewContext('Object.assign(new TypeError("sandboxed"), { code: "E_BOX" })');
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch (err) {
        const e = err as Error & { code?: unknown };
        seen.push([e.name, e.message, e.code]);
      }
      await ctx.waitForEvent("go");
      return seen.length;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "realm-throw" });
    await until(async () => (await e.getRun("realm-throw"))?.status === "waiting", "waiting");
    await e.sendEvent("realm-throw", "go", null);
    expect(await run.result()).toBe(2);
    expect(seen[0]).toEqual(["TypeError", "sandboxed", "E_BOX"]);
    expect(seen[1]).toEqual(seen[0]);
  });
});
