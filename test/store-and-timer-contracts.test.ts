// Two contracts the per-step optimisations must keep (found by an adversarial review):
// a store verb answers with a promise even for a malformed write, never a synchronous
// throw, on every backend and through the encrypted store; and a run ends when the
// global setTimeout hands back a number (a timer shim), as cairn's other timers allow.

import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { type Store, workflow } from "../src/index.js";
import { encryptedStore } from "../src/store/encrypted-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

describe.each(BACKENDS)("store and timer contracts (%s)", (backend) => {
  const harness = useHarness(backend);

  it.each(["plain", "encrypted"])(
    "%s store: a malformed write is a rejection, not a throw",
    async (variant) => {
      const raw = harness().store();
      const key = { id: "k1", key: randomBytes(32).toString("base64") };
      const store: Store = variant === "plain" ? raw : encryptedStore(raw, { keys: [key] });
      await store.open({ clock: createVirtualClock() });
      let answer: Promise<unknown> | undefined;
      let thrown: unknown;
      try {
        answer = store.appendRecords([{ runId: 5 as unknown as string, epoch: 1 }]);
      } catch (err) {
        thrown = err;
      }
      const settled = answer?.then(
        () => "resolved",
        (err: unknown) => err,
      );
      await store.close();
      expect(thrown).toBeUndefined();
      expect(await settled).toBeInstanceOf(TypeError);
    },
  );

  const realSetTimeout = globalThis.setTimeout;
  afterEach(() => {
    globalThis.setTimeout = realSetTimeout;
  });

  it("runs end while setTimeout answers a number (a shim without unref)", async () => {
    const h = harness();
    const wf = workflow({ name: "numeric-timers", version: "1" }, async (ctx) =>
      ctx.step("a", () => 1),
    );
    const e = h.engine([wf]);
    globalThis.setTimeout = ((fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) =>
      Number(realSetTimeout(fn, ms, ...args))) as unknown as typeof setTimeout;
    const outcome = await Promise.race([
      (async () => {
        const first = await e.start(wf, undefined);
        await first.result();
        const second = await e.start(wf, undefined);
        return second.result();
      })().catch((err: Error) => `rejected: ${err.message}`),
      new Promise((r) => realSetTimeout(() => r("hung for 5 s"), 5_000)),
    ]);
    globalThis.setTimeout = realSetTimeout;
    expect(outcome).toBe(1);
  });
});
