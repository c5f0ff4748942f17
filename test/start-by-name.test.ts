// Starting runs without importing the workflow's code: by name (the newest version this
// engine or a live worker serves) or by name@version; starting an id again.

import { describe, expect, it } from "vitest";
import { RunConflictError, UnknownWorkflowError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

const v1 = workflow({ name: "greet", version: "1" }, async (_ctx, who: string) => `hello ${who}`);
const v2 = workflow({ name: "greet", version: "2" }, async (_ctx, who: string) => `hi ${who}`);
const v10 = workflow({ name: "greet", version: "10" }, async (_ctx, who: string) => `hey ${who}`);

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a name starts the newest version registered here; name@version that one", async () => {
    const h = harness();
    const e = h.engine([v1, v10, v2]);
    const newest = await e.start("greet", "ana");
    expect(await newest.result()).toBe("hey ana");
    expect((await newest.info())?.version).toBe("10");
    const pinned = await e.start("greet@2", "bo");
    expect(await pinned.result()).toBe("hi bo");
  });

  it("a client with no workflows starts the newest version a live worker serves", async () => {
    const h = harness();
    const worker = h.engine([v1, v2]);
    await worker.listRuns({ limit: 1 }); // registered in the store
    const client = h.engine([], { worker: false });
    const run = await client.start("greet", "cy");
    expect(await run.result()).toBe("hi cy");
    await expect(client.start("nope", 1)).rejects.toBeInstanceOf(UnknownWorkflowError);
    await expect(client.start("nope", 1)).rejects.toThrow(/start "nope@<version>"/);
    // A name or version no workflow can have is refused, not pinned to a run never served.
    for (const ref of ["a@b@c", "greet@", "@1", "greet@1 ", "gr eet", "x\u0000y@1"]) {
      await expect(client.start(ref, 1, { id: "bad" })).rejects.toThrow(
        /is not a workflow name or name@version/,
      );
    }
    expect(await client.getRun("bad")).toBeUndefined();
  });

  it("starting an id again returns that run for the same input, and refuses another input", async () => {
    const h = harness();
    const e = h.engine([v1]);
    const first = await e.start(v1, "di", { id: "same" });
    const again = await e.start(v1, "di", { id: "same" });
    expect(again.id).toBe(first.id);
    // The second start created nothing, and says so.
    expect([first.created, again.created]).toEqual([true, false]);
    const err = await e.start(v1, "eve", { id: "same" }).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(RunConflictError);
    expect((err as Error).message).toMatch(/"same" already exists with a different input/);
    // handle(workflow, id) infers the output type.
    const typed: string = await e.handle(v1, "same").result();
    expect(typed).toBe("hello di");
  });
});
