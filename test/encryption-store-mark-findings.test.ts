// A keyless door (the HTTP API of `cairn ui` without keys, the CLI without
// $CAIRN_ENCRYPTION_KEYS) on an encrypted store whose runs have not finished: its guess from
// the newest runs' stored text saw no ciphertext (a run started without input, its step
// result encrypted by the worker), and an event's payload was stored in plain text. The
// store now says that it encrypts (encryptedStore marks it when it opens it), and every
// keyless door refuses. Failed before the mend on both backends.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { EncryptedValue } from "../src/engine/views.js";
import { createHttpApp } from "../src/http/index.js";
import {
  createEngine,
  type EncryptionKey,
  type Engine,
  encryptedStore,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { BACKENDS, type Backend, pgUrl } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

type ErrorJson = { error: { code: string; message: string } };

const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

const wf = workflow({ name: "wf", version: "1" }, async (ctx) => {
  await ctx.step("read", async () => "SECRET-step");
  return ctx.waitForEvent("card");
});

/** Fresh storage of `backend`: new Stores on it, and the CLI's environment for it. */
function storage(
  backend: Backend,
  cleanups: Array<() => Promise<void> | void>,
): { make: () => Store; env: Record<string, string> } {
  if (backend === "sqlite") {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    return { make: () => sqliteStore(db.path), env: { CAIRN_STORE: `sqlite:${db.path}` } };
  }
  const reused = reusableSchema(pgUrl!);
  cleanups.push(reused.release);
  return {
    make: () => postgresStore(reused.url, { schema: reused.schema }),
    env: { CAIRN_STORE: reused.url, CAIRN_PG_SCHEMA: reused.schema },
  };
}

/** An encrypted worker, and a run started by a keyless client without input: waiting for
 *  its event, its only payload the step result its worker encrypted. */
async function waitingEncryptedRun(
  make: () => Store,
  cleanups: Array<() => Promise<void> | void>,
): Promise<{ worker: Engine; client: Engine }> {
  const worker = createEngine({
    store: encryptedStore(make(), { keys: [k1] }),
    workflows: [wf],
    pollIntervalMs: 10,
  });
  const client = createEngine({ store: make(), workflows: [wf], worker: false });
  cleanups.push(
    () => worker.close(),
    () => client.close(),
  );
  await client.start(wf, undefined, { id: "p1" });
  await until(async () => (await worker.getRun("p1"))?.status === "waiting", "p1 waits");
  // What the keyless client sees: nothing encrypted in the run itself, an encrypted step.
  const run = await client.getRun("p1");
  expect(run?.input).toBeUndefined();
  expect((await client.getSteps("p1"))[0]?.result).toBeInstanceOf(EncryptedValue);
  return { worker, client };
}

describe.each(BACKENDS)(
  "a keyless door on an encrypted store with no finished run (%s)",
  (backend: Backend) => {
    it("the HTTP API refuses an event's payload and a new run's input (409), writing nothing; reads still answer", async () => {
      const cleanups: Array<() => Promise<void> | void> = [];
      const { make } = storage(backend, cleanups);
      try {
        const { worker, client } = await waitingEncryptedRun(make, cleanups);
        const app = createHttpApp({ engine: client });
        cleanups.push(() => app.close());
        const sent = await call<ErrorJson>(app.fetch, "POST", "/api/runs/p1/events/card", {
          body: "SECRET-card",
        });
        expect([sent.status, sent.body.error?.code]).toEqual([409, "ENCRYPTION_KEY_MISSING"]);
        expect(sent.body.error.message).toMatch(/marked encrypted.*nothing was written/);
        const started = await call<ErrorJson>(app.fetch, "POST", "/api/runs", {
          body: { workflow: "wf", input: "SECRET-input", id: "p2" },
        });
        expect([started.status, started.body.error?.code]).toEqual([409, "ENCRYPTION_KEY_MISSING"]);
        expect(await worker.listEvents("p1")).toEqual([]);
        expect(await worker.getRun("p2")).toBeUndefined();
        // Reading stays allowed: the step shows as encrypted.
        const read = await call(app.fetch, "GET", "/api/runs/p1");
        expect(read.status).toBe(200);
        // Whoever turns encryption off removes the mark; then the guess alone decides again.
        const unmark = make();
        await unmark.open({ clock: realClock });
        await unmark.unmarkEncrypted?.();
        expect(await unmark.isMarkedEncrypted?.()).toBe(false);
        await unmark.close();
        const after = await call(app.fetch, "POST", "/api/runs/p3/events/card", {
          body: "plain",
        });
        expect(after.status).toBe(404); // no such run: past the door, not refused by it
      } finally {
        for (const c of cleanups.splice(0).reverse()) await c();
      }
    });

    it("`cairn start` and `cairn send` without $CAIRN_ENCRYPTION_KEYS refuse an input and a payload, naming the store", async () => {
      const cleanups: Array<() => Promise<void> | void> = [];
      const { make, env } = storage(backend, cleanups);
      try {
        const { worker } = await waitingEncryptedRun(make, cleanups);
        // A new run's input: before the mark, the newest runs (none finished, none with an
        // encrypted input) let it be stored in plain text.
        const started = await cairn(
          ["start", "wf@1", "--input", '"SECRET-input"', "--id", "p2"],
          env,
        );
        expectFailure(started, 1, /is marked encrypted .*nothing was started/);
        expect(await worker.getRun("p2")).toBeUndefined();
        // An event's payload for a run no worker has executed yet (a version none serves):
        // nothing of it is encrypted, and the CLI stored the payload in plain text.
        const pending = await cairn(["start", "wf@2", "--id", "p3"], env);
        expect(pending.code, pending.stderr).toBe(0);
        const sent = await cairn(["send", "p3", "card", '"SECRET-card"'], env);
        expectFailure(
          sent,
          1,
          /is marked encrypted .*\$CAIRN_ENCRYPTION_KEYS is not set.*nothing was written/,
        );
        expect(await worker.listEvents("p3")).toEqual([]);
        // A run whose journal shows ciphertext is refused naming its key, as before.
        const onEncrypted = await cairn(["send", "p1", "card", '"SECRET-card"'], env);
        expectFailure(onEncrypted, 1, /run "p1" is encrypted \(key "k1"\)/);
        expect(await worker.listEvents("p1")).toEqual([]);
        const shown = await cairn(["show", "p1"], env);
        expect(shown.code, shown.stderr).toBe(0);
        // With the key it goes through, encrypted.
        const keyed = await cairn(["send", "p1", "card", '"SECRET-card"'], {
          ...env,
          CAIRN_ENCRYPTION_KEYS: `k1=${k1.key}`,
        });
        expect(keyed.code, keyed.stderr).toBe(0);
        expect((await worker.listEvents("p1")).map((e) => e.payload)).toEqual(["SECRET-card"]);
      } finally {
        for (const c of cleanups.splice(0).reverse()) await c();
      }
    });

    it("an encryptedStore that cannot write the mark (read-only access) opens and reads; the next that can marks it", async () => {
      const cleanups: Array<() => Promise<void> | void> = [];
      const { make } = storage(backend, cleanups);
      try {
        await waitingEncryptedRun(make, cleanups);
        const plain = make();
        await plain.open({ clock: realClock });
        await plain.unmarkEncrypted?.();
        await plain.close();
        // A read-only role or file: the mark's write fails, nothing else is asked of it.
        const readOnly = new Proxy(make(), {
          get(target, prop, receiver) {
            if (prop === "markEncrypted") return () => Promise.reject(new Error("read-only"));
            const value = Reflect.get(target, prop, receiver);
            return typeof value === "function" ? value.bind(target) : value;
          },
        });
        const reader = createEngine({
          store: encryptedStore(readOnly, { keys: [k1] }),
          workflows: [wf],
          worker: false,
        });
        cleanups.push(() => reader.close());
        expect((await reader.getSteps("p1"))[0]?.result).toBe("SECRET-step");
        const check = make();
        await check.open({ clock: realClock });
        expect(await check.isMarkedEncrypted?.()).toBe(false);
        await check.close();
        const writer = encryptedStore(make(), { keys: [k1] });
        await writer.open({ clock: realClock });
        expect(await writer.isMarkedEncrypted?.()).toBe(true);
        await writer.close();
      } finally {
        for (const c of cleanups.splice(0).reverse()) await c();
      }
    });

    it("a store no encryptedStore opened is not marked: a keyless door writes as before", async () => {
      const cleanups: Array<() => Promise<void> | void> = [];
      const { make } = storage(backend, cleanups);
      const client = createEngine({ store: make(), workflows: [wf], worker: false });
      const app = createHttpApp({ engine: client });
      try {
        await client.start(wf, undefined, { id: "p1" });
        const sent = await call(app.fetch, "POST", "/api/runs/p1/events/card", { body: "plain" });
        expect(sent.status).toBe(201);
      } finally {
        app.close();
        await client.close();
        for (const c of cleanups.splice(0).reverse()) await c();
      }
    });
  },
);
