// Attacks on the `s` a step body is handed since it became an AttemptContext (a class, its
// getters on its prototype, c990a4a). Where it was an object literal whose getters were
// closures, `s` read the same through anything that forwards `this`: a Proxy around it
// (a tracing wrapper's `new Proxy(s, {})`) and an object made from it (Object.create(s)).
// Its getters read private fields (#abort, #runId...), which a Proxy or a derived object
// does not have: reading s.signal or s.idempotencyKey through one threw "Cannot read
// private member". Mended: the fields are keyed by module symbols, read through `this` as
// any property is. And a spread of `s` copied no idempotencyKey and no signal (they were
// no longer own properties): mended, each attempt defines the prototype's getters as its own.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type StepContext, sqliteStore, workflow } from "../src/index.js";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function runWith<T>(
  name: string,
  body: (s: StepContext) => T,
): Promise<{ key: T; direct: string }> {
  let direct = "";
  const wf = workflow({ name, version: "1" }, async (ctx) =>
    ctx.step("a", (s: StepContext) => {
      direct = s.idempotencyKey;
      return body(s);
    }),
  );
  const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
  cleanups.push(() => engine.close());
  const key = (await (await engine.start(wf, {})).result()) as T;
  return { key, direct };
}

describe("a step attempt's `s` through what forwards `this`", () => {
  it("reads its key and signal through a Proxy around it", async () => {
    const { key, direct } = await runWith("s-proxy", (s) => {
      const traced = new Proxy(s, {});
      return {
        key: traced.idempotencyKey,
        aborted: traced.signal.aborted,
        attempt: traced.attempt,
      };
    });
    expect(key).toEqual({ key: direct, aborted: false, attempt: 1 });
  });

  it("reads its key and signal through an object made from it", async () => {
    const { key, direct } = await runWith("s-create", (s) => {
      const derived = Object.create(s) as StepContext;
      return { key: derived.idempotencyKey, aborted: derived.signal.aborted };
    });
    expect(key).toEqual({ key: direct, aborted: false });
  });

  // `{ ...s }` (or Object.assign({}, s)) copies only own properties: idempotencyKey and
  // signal were undefined in the copy, though StepContext's type says they are there (a
  // helper handed `{ ...s, x }` lost the key a provider deduplicates by). Mended: own
  // accessors from shared descriptors, as the ctx has (~0.5 us an attempt).
  it("copies its key and signal in a spread", async () => {
    const { key, direct } = await runWith("s-spread", (s) => {
      const copy = { ...s };
      return { key: copy.idempotencyKey, hasSignal: copy.signal instanceof AbortSignal };
    });
    expect(key).toEqual({ key: direct, hasSignal: true });
  });
});
