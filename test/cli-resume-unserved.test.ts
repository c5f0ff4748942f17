// `cairn resume` of a run no live worker serves said "Resumed run ... (status pending)" and
// nothing more, while `start` and `fork` warn in that case: a run paused because no live
// worker has its version was paused again by the next worker's sweep, and a failed run of a
// retired version waited for nobody. It now warns as they do, naming the version (resume.ts).

import { afterAll, describe, expect, it } from "vitest";
import { createEngine, FatalError, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const flaky = workflow({ name: "flaky", version: "1" }, async (ctx) => {
  await ctx.step("a", () => {
    throw new FatalError("not yet");
  });
});

describe("cairn resume of a run no live worker serves", () => {
  const db = tempDbPath();
  afterAll(() => db.cleanup());

  it("warns on stderr, naming the version, and still resumes it (exit 0)", async () => {
    const engine = createEngine({
      store: sqliteStore(db.path),
      workflows: [flaky],
      pollIntervalMs: 20,
    });
    await engine.start(flaky, undefined, { id: "f-1" });
    await until(async () => (await engine.getRun("f-1"))?.status === "failed", "f-1 failed");
    await engine.close(); // its worker is gone: nothing serves flaky@1 now

    const res = await cairn(["resume", "f-1", "--store", `sqlite:${db.path}`]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain('Resumed run "f-1" (status pending).');
    expect(res.stderr).toContain(
      'cairn: warning: no worker is running; run "f-1" stays pending until a worker serving flaky@1 runs',
    );
  });
});
