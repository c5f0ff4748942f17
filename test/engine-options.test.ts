// createEngine() dropped options it does not take: `createEngine({ leaseMS: 5_000, workflow:
// [wf] })` (an options object built elsewhere, or plain JavaScript: TypeScript refuses the
// literal) made an engine with the default 30 s lease that executed no workflow, silently.
// It now throws a TypeError naming the options and the options there are. Every option
// docs/API.md lists for createEngine is taken, and so is the internal storeCloseMinMs that
// cairn's own tests pass (not named in the error: it is in no public type).
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import {
  createEngine,
  type Engine,
  type EngineOptions,
  realClock,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const built = (o: Record<string, unknown>) => o as EngineOptions;
const engines: Engine[] = [];
const dbs: Array<{ cleanup: () => void }> = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
  for (const d of dbs.splice(0)) d.cleanup();
});
function memoryStore() {
  const db = tempDbPath();
  dbs.push(db);
  return sqliteStore(db.path);
}

/** The option names docs/API.md's createEngine table lists, in its order. */
function documentedNames(): string[] {
  const api = readFileSync(new URL("../docs/API.md", import.meta.url), "utf8");
  const from = api.indexOf("const engine = createEngine({ store: sqliteStore");
  const table = api.slice(
    api.indexOf("| option |", from),
    api.indexOf("\n\n", api.indexOf("| option |", from)),
  );
  return [...table.matchAll(/^\| `(\w+)` \|/gm)].map((m) => m[1] as string);
}

describe("createEngine refuses options it does not take", () => {
  it("leaseMS and workflow are refused, naming them and the options there are", () => {
    const wf = workflow({ name: "engine", version: "1" }, async () => "ok");
    const names = documentedNames();
    expect(names.length).toBeGreaterThan(15);
    expect(() =>
      createEngine(built({ store: memoryStore(), leaseMS: 5_000, workflow: [wf] })),
    ).toThrow(
      new TypeError(
        `createEngine(): unknown options "leaseMS", "workflow"; the options are ${names.join(", ")}`,
      ),
    );
    expect(() => createEngine(built({ store: memoryStore(), storeCloseMinMS: 1 }))).toThrow(
      /^createEngine\(\): unknown option "storeCloseMinMS"; the options are store, workflows, /,
    );
  });

  it("every option docs/API.md documents is taken, and the internal storeCloseMinMs", async () => {
    const wf = workflow({ name: "engine-all", version: "1" }, async () => "ok");
    const given: Record<string, unknown> = {
      store: memoryStore(),
      workflows: [wf],
      worker: true,
      concurrency: 2,
      leaseMs: 30_000,
      heartbeatMs: 10_000,
      pollIntervalMs: 10,
      clock: realClock,
      closeGraceMs: 100,
      maxPayloadBytes: 1 << 20,
      inProcessRetryMs: 5_000,
      abortGraceMs: 1_000,
      replayStallMs: 60_000,
      log: () => {},
      logger: { info() {}, debug() {}, warn() {}, error() {} },
      workspaceRoot: ".cairn/workspaces",
      approvalKeys: [{ id: "k1", secret: "s".repeat(32) }],
      limits: { maxWorkflows: 10 },
      retention: { finishedOlderThan: "7d" },
      storeCloseMinMs: 100,
    };
    expect(Object.keys(given).slice(0, -1)).toEqual(documentedNames());
    const e = createEngine(built(given));
    engines.push(e);
    const run = await e.start(wf, undefined, { id: "all" });
    expect(await run.result()).toBe("ok");
  });
});
