// Finding: a parent that crashed between its child's create and its intent, on a cairn
// that took a child's input digest with Errors by name, message and code (no "e2." mark),
// is replayed by this cairn. Its digest of the input now is marked, so the two cannot be
// compared as they are, and the found child was told by its stored input alone: through the
// child's input schema (or on another version) that cannot tell, and the child was adopted
// whatever the input now was, even an Error of another message, which the older digest
// itself refuses. The older digest is now compared with the input's digest by name first.
// The same held for a child created by this very cairn with an input without an Error (an
// unmarked digest) found by a call that now hands one with an Error.

import { createHash } from "node:crypto";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { encodeIdentity } from "../src/codec/codec.js";
import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  NonDeterminismError,
  sqliteStore,
  workflow,
} from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { advanceUntil } from "./helpers/engines.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

/** A digest as cairn took it before Errors counted by their parts. */
const olderDigest = (input: unknown) =>
  createHash("sha256").update(encodeIdentity(input, "byName")).digest("base64url");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const writesChildIntent = (args: unknown[]) =>
  (args[0] as RunWrite[]).some((w) => w.intents?.some((i) => i.kind === "child"));

const kid = workflow(
  { name: "found-older-kid", version: "1", input: z.object({ e: z.any() }) },
  async (ctx, x: { e: Error }) => {
    await ctx.sleep("nap", "1s");
    return `kid saw ${x.e.message}`;
  },
);
const parentHanding = (message: string, asError = true) =>
  workflow({ name: "found-older-parent", version: "1" }, async (ctx) =>
    ctx.child("kid", kid as never, { e: asError ? new Error(message) : { message } }),
  );

/** The parent hands `{ e: new Error(first) }` (`older`: false, `{ e: { message: first } }`),
 *  creates its child and crashes before the child's intent; with `older`, the child's kept
 *  digest is made the one an older cairn took; an engine on `after` then takes the parent
 *  over. */
async function crashWithOlderDigest(first: string, after: AnyWorkflow[], older = true) {
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  const clock = createVirtualClock();
  const store = crashableStore(sqliteStore(db.path), {
    crashBefore: (call) => call.verb === "appendRecords" && writesChildIntent(call.args),
  });
  const e1 = createEngine({
    store,
    workflows: [parentHanding(first, older), kid],
    clock,
    pollIntervalMs: 10,
  });
  await e1.start(parentHanding(first, older), undefined, { id: "p" });
  await until(async () => store.crashed, "crash before the child's intent");
  await store.settled();
  if (older) {
    const raw = new Database(db.path);
    raw
      .prepare("UPDATE runs SET handed_input_digest = ? WHERE id = 'p/kid'")
      .run(olderDigest({ e: new Error(first) }));
    raw.close();
  }
  const e2: Engine = createEngine({
    store: sqliteStore(db.path),
    workflows: after,
    clock,
    pollIntervalMs: 10,
  });
  cleanups.push(() => e2.close());
  const out = advanceUntil(clock, e2.handle("p").result(), 1_000, 200);
  out.catch(() => {});
  return out;
}

describe("a found child whose digest an older cairn took, of an input with an Error", () => {
  it("is refused when the call now hands an Error of another message (through the child's input schema)", async () => {
    const out = crashWithOlderDigest("first", [parentHanding("second"), kid]);
    // Adopted, the parent took "kid saw first": a result computed from another input.
    await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
    await expect(out).rejects.toThrow(/Run "p".*key "kid".*another input/);
  });

  it("is adopted when the call hands the same input", async () => {
    const out = crashWithOlderDigest("same", [parentHanding("same"), kid]);
    expect(await out).toBe("kid saw same");
  });

  it("a child this cairn created with an input without an Error is refused to a call that now hands one", async () => {
    // Created with { e: { message: "same" } }; the code now hands { e: new Error("same") }.
    const out = crashWithOlderDigest("same", [parentHanding("same"), kid], false);
    await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
    await expect(out).rejects.toThrow(/Run "p".*key "kid".*another input/);
  });
});
