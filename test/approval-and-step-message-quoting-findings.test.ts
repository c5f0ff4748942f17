// The messages refusing an approval name a run does not have, and a fork from a step a run
// has not recorded, quote what was given as the run-id messages do (JSON): a NUL or a lone
// surrogate in it is escaped ("\u0000", "\ud800"), never printed raw into a terminal or a
// log line.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";

const one = workflow({ name: "one", version: "1" }, async (ctx) => ctx.step("a", async () => 1));

/** A NUL or a surrogate left as it is (an escaped one is plain ASCII). */
function raw(s: string | undefined): boolean {
  return s === undefined || s.includes("\u0000") || /[\ud800-\udfff]/.test(s);
}

describe("messages that quote a name given", () => {
  const harness = useHarness("sqlite");

  it("no approval: the name and run id are escaped", async () => {
    const h = harness();
    const e = h.engine([one]);
    const done = await e.start(one, undefined, { id: "r" });
    await done.result();
    const err = await e.approve("r", "de\u0000ploy\ud800").then(
      () => undefined,
      (x: Error) => x,
    );
    expect(err?.message).toBe(
      'Run "r" has no approval "de\\u0000ploy\\ud800" (it has asked for none yet)',
    );
    expect(raw(err?.message)).toBe(false);
  });

  it("no recorded step: the step key is escaped", async () => {
    const h = harness();
    const e = h.engine([one]);
    const done = await e.start(one, undefined, { id: "r" });
    await done.result();
    const err = await e.fork("r", { fromStep: "pl\u0000an\udc00" }).then(
      () => undefined,
      (x: Error) => x,
    );
    expect(err?.message).toBe(
      'Run "r" has no recorded step "pl\\u0000an\\udc00"; fork from one of: a',
    );
    expect(raw(err?.message)).toBe(false);
  });
});
