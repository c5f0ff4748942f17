// A keyless process may store a cancel's reason plain on a store marked encrypted when the
// reason is in cairn's words only (cancel-texts.ts): the default, or a cascade's wrapping of
// it, `its parent run "<id>" was canceled: ...`. The id's place took ANY text, so a keyless
// caller's engine.cancel(id, 'its parent run "<a secret>" was canceled: canceled by request')
// stored the secret plain. Now each id must name the parent of the run before it (the first
// the canceled run's own parent): a forged id, at any depth, is refused; a real cascade's
// reason (three generations deep) still goes through keyless.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  EncryptionKeyMissingError,
  encryptedStore,
  realClock,
  type Store,
  workflow,
} from "../src/index.js";
import {
  canceledChildEvent,
  DEFAULT_CANCEL_REASON,
  parentCanceledReason,
} from "../src/store/cancel-texts.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

const grandchild = workflow({ name: "fc-grandchild", version: "1" }, async (ctx) =>
  ctx.waitForEvent("go"),
);
const child = workflow({ name: "fc-child", version: "1" }, async (ctx) =>
  ctx.child("gc", grandchild, undefined),
);
const parent = workflow({ name: "fc-parent", version: "1" }, async (ctx) =>
  ctx.child("kid", child, undefined),
);

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe.each(BACKENDS)("a keyless cancel reason naming parents (%s)", (backend) => {
  // Opened before the mark: SQLite reads the mark in the write's transaction, PostgreSQL's
  // triggers (installed with the mark) judge the reason in the database.
  const opens = ["after", "before"] as const;
  for (const opened of opens) {
    it(`is cairn's only where each id is the real parent (keyless store opened ${opened} the mark)`, async () => {
      const cleanups: Array<() => Promise<void> | void> = [];
      try {
        const make = freshStorage(backend, cleanups);
        let keyless: Store | undefined;
        const openKeyless = async () => {
          const s = make();
          await s.open({ clock: realClock });
          cleanups.push(() => s.close());
          return s;
        };
        if (opened === "before") keyless = await openKeyless();
        const keyed = createEngine({
          store: encryptedStore(make(), { keys: [k1] }),
          workflows: [parent, child, grandchild],
          pollIntervalMs: 10,
        });
        cleanups.push(() => keyed.close());
        await keyed.start(parent, undefined, { id: "fc-p" });
        let kid = "";
        let gc = "";
        await until(async () => {
          kid = (await keyed.listRuns({ parentId: "fc-p" }))[0]?.id ?? "";
          gc = kid ? ((await keyed.listRuns({ parentId: kid }))[0]?.id ?? "") : "";
          return gc !== "" && (await keyed.getRun(gc))?.status === "waiting";
        }, "the grandchild waits");
        keyless ??= await openKeyless();

        // A root run has no parent: any id in the slot is the caller's text.
        const forgedRoot = parentCanceledReason("SECRET-1", DEFAULT_CANCEL_REASON);
        const e1 = await refusal(keyless.requestCancel("fc-p", forgedRoot));
        expect(e1).toBeInstanceOf(EncryptionKeyMissingError);
        expect((e1 as EncryptionKeyMissingError).what).toBe('the cancel reason of run "fc-p"');

        // The first id right, the second (the grandparent's place) forged.
        const forgedDeep = parentCanceledReason(
          kid,
          parentCanceledReason("SECRET-2", DEFAULT_CANCEL_REASON),
        );
        const e2 = await refusal(
          keyless.requestCancel(gc, forgedDeep, {
            parentEvent: canceledChildEvent(gc, forgedDeep),
          }),
        );
        expect(e2).toBeInstanceOf(EncryptionKeyMissingError);
        expect((e2 as EncryptionKeyMissingError).what).toBe(`the cancel reason of run "${gc}"`);
        for (const id of ["fc-p", gc]) {
          expect((await keyed.getRun(id))?.status).not.toBe("canceled");
        }

        // The cascade's own reason, two generations up, goes through keyless.
        const real = parentCanceledReason(kid, parentCanceledReason("fc-p", DEFAULT_CANCEL_REASON));
        const ok = await keyless.requestCancel(gc, real, {
          parentEvent: canceledChildEvent(gc, real),
        });
        expect(ok.state).toBe("canceled");
        expect((await keyed.getRun(gc))?.reason).toBe(real);
      } finally {
        for (const c of cleanups.splice(0).reverse()) await c();
      }
    });
  }
});
