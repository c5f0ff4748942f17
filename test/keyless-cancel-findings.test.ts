// A cancel without a reason from a process without keys, on a store marked encrypted, was
// refused (EncryptionKeyMissingError, "the cancel reason ... would be stored in plain text"):
// the store took cairn's default reason, and the child-result event it carries to a waiting
// parent, for payloads. They are cairn's own words (cancel-texts.ts), holding nothing but run
// ids, which every store keeps plain: such a cancel goes through now, and so does its cascade
// to the run's children (their reason wraps the default). A cancel WITH a reason from a
// keyless process is still refused, naming the store and what to do.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  EncryptionKeyMissingError,
  encryptedStore,
  workflow,
} from "../src/index.js";
import { canceledChildEvent } from "../src/store/cancel-texts.js";
import { CHILD_EVENT_PREFIX } from "../src/workflow/child-calls.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

const child = workflow({ name: "kc-child", version: "1" }, async (ctx) => ctx.waitForEvent("go"));
const parent = workflow({ name: "kc-parent", version: "1" }, async (ctx) =>
  ctx.child("kid", child, { secret: "s" }),
);

describe("cancel texts", () => {
  it("name the child-result event as ctx.child waits for it", () => {
    expect(canceledChildEvent("x", "y").name).toBe(`${CHILD_EVENT_PREFIX}x`);
  });
});

describe.each(BACKENDS)("a keyless cancel on a store marked encrypted (%s)", (backend) => {
  it("goes through without a reason (with the run's children); a reason given is refused", async () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    try {
      const make = freshStorage(backend, cleanups);
      const keyed = createEngine({
        store: encryptedStore(make(), { keys: [k1] }),
        workflows: [parent, child],
        pollIntervalMs: 10,
      });
      cleanups.push(() => keyed.close());
      const run = await keyed.start(parent, undefined, { id: "kc-p" });
      let kid = "";
      await until(async () => {
        const [c] = await keyed.listRuns({ parentId: "kc-p" });
        kid = c?.id ?? "";
        return c?.status === "waiting";
      }, "the child waits");
      // A process without keys, opened after the mark (it knows the store is marked).
      const keyless = createEngine({ store: make(), worker: false });
      cleanups.push(() => keyless.close());
      const refused = await keyless.cancel("kc-p", "SECRET why").then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(EncryptionKeyMissingError);
      expect((refused as EncryptionKeyMissingError).what).toBe('the cancel reason of run "kc-p"');
      expect((refused as Error).message).toMatch(/marked encrypted.*Give this process the keys/);
      expect((await keyed.getRun("kc-p"))?.status).not.toBe("canceled");

      await keyless.cancel("kc-p");
      await until(
        async () => (await keyed.getRun("kc-p"))?.status === "canceled",
        "the parent is canceled",
      );
      await until(
        async () => (await keyed.getRun(kid))?.status === "canceled",
        "the child is canceled with it",
      );
      expect((await keyed.getRun("kc-p"))?.reason).toBe("canceled by request");
      expect((await keyed.getRun(kid))?.reason).toBe(
        'its parent run "kc-p" was canceled: canceled by request',
      );
      await expect(run.result()).rejects.toThrow(/was canceled/);
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c();
    }
  });
});
