// Findings on the mends of the HTTP API and of workspaces (the emptying of a default
// workspace directory, live streams of deleted runs): each failed before its own mend.

import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";
import { tempDir, until } from "./helpers/sqlite.js";

describe("a default workspace directory emptied at its first opening", () => {
  const harness = useHarness("sqlite");

  const lister = (name: string) =>
    workflow({ name, version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo");
      return ws.step("look", () => readdirSync(ws.dir).sort());
    });

  // The emptying went through restoreTo, which walks the root following a symlink: a
  // <workspaceRoot>/<run id>/<name> that is a symlink (made by hand to point a run with a
  // known id at a checkout, which the opening then took as its base) had everything it
  // points to deleted, outside the workspace root.
  it("a default directory that is a symlink: what it points to is not deleted", async () => {
    const h = harness();
    const tmp = tempDir();
    const outside = join(tmp.dir, "my-checkout");
    mkdirSync(join(outside, "src"), { recursive: true });
    writeFileSync(join(outside, "src", "main.ts"), "precious\n");
    mkdirSync(join(tmp.dir, "ws", "R1"), { recursive: true });
    symlinkSync(outside, join(tmp.dir, "ws", "R1", "repo"));
    const wf = lister("empty-symlink-root");
    try {
      const engine = h.engine([wf], { workspaceRoot: join(tmp.dir, "ws") });
      const run = await engine.start(wf, undefined, { id: "R1" });
      await run.result().catch(() => undefined);
      expect(readFileSync(join(outside, "src", "main.ts"), "utf8")).toBe("precious\n");
    } finally {
      tmp.cleanup();
    }
  });

  // The same through the run's directory: <workspaceRoot>/<run id> a symlink.
  it("a run directory that is a symlink: what it points to is not deleted", async () => {
    const h = harness();
    const tmp = tempDir();
    const outside = join(tmp.dir, "elsewhere");
    mkdirSync(join(outside, "repo"), { recursive: true });
    writeFileSync(join(outside, "repo", "notes.md"), "precious\n");
    mkdirSync(join(tmp.dir, "ws"), { recursive: true });
    symlinkSync(outside, join(tmp.dir, "ws", "R2"));
    const wf = lister("empty-symlink-rundir");
    try {
      const engine = h.engine([wf], { workspaceRoot: join(tmp.dir, "ws") });
      const run = await engine.start(wf, undefined, { id: "R2" });
      await run.result().catch(() => undefined);
      expect(readFileSync(join(outside, "repo", "notes.md"), "utf8")).toBe("precious\n");
    } finally {
      tmp.cleanup();
    }
  });

  // With workspaceRoot set to a directory of the user's (".", a project) and a run id
  // they chose, <root>/<id>/<name> can be a directory of theirs: the emptying deleted its
  // files, outside any checkpoint. Only a run directory cairn made (marked) is emptied now.
  it("a directory of the user's under workspaceRoot is not emptied by a run's opening", async () => {
    const h = harness();
    const tmp = tempDir();
    const project = join(tmp.dir, "project");
    mkdirSync(join(project, "docs", "repo"), { recursive: true });
    writeFileSync(join(project, "docs", "repo", "index.md"), "precious\n");
    const wf = lister("empty-user-dir");
    try {
      const engine = h.engine([wf], { workspaceRoot: project });
      const run = await engine.start(wf, undefined, { id: "docs" });
      await run.result().catch(() => undefined);
      expect(readFileSync(join(project, "docs", "repo", "index.md"), "utf8")).toBe("precious\n");
    } finally {
      tmp.cleanup();
    }
  });

  // The emptying walked with no rules: a leftover name that is not UTF-8 (in node_modules,
  // ignored by default, so it never stopped the old run) is refused by the walk, and the new
  // run under the id fails at its opening, every time, instead of starting empty.
  it("a leftover name that is not UTF-8 is emptied too; the new run starts empty", async () => {
    const h = harness();
    const tmp = tempDir();
    const dir = join(tmp.dir, "ws", "R3", "repo");
    mkdirSync(join(dir, "node_modules", "pkg"), { recursive: true });
    // Left by an earlier run under the id: its run directory is one cairn made (marked).
    writeFileSync(join(tmp.dir, "ws", "R3", ".cairn-run"), "");
    writeFileSync(join(dir, "left.txt"), "old\n");
    writeFileSync(Buffer.from(`${dir}/node_modules/pkg/caf\xe9.js`, "latin1"), "x");
    // And a read-only directory (a Go module cache), and symlinks out: only the links go.
    mkdirSync(join(dir, "ro", "deep"), { recursive: true });
    writeFileSync(join(dir, "ro", "deep", "f"), "x");
    chmodSync(join(dir, "ro", "deep"), 0o555);
    chmodSync(join(dir, "ro"), 0o555);
    const outside = join(tmp.dir, "outside");
    mkdirSync(outside);
    writeFileSync(join(outside, "keep.txt"), "kept\n");
    symlinkSync(outside, join(dir, "link-dir"));
    symlinkSync(join(outside, "keep.txt"), join(dir, "link-file"));
    const wf = lister("empty-latin1");
    try {
      const engine = h.engine([wf], { workspaceRoot: join(tmp.dir, "ws") });
      const run = await engine.start(wf, undefined, { id: "R3" });
      expect(await run.result()).toEqual([]);
      expect(existsSync(join(dir, "node_modules"))).toBe(false);
      expect(readFileSync(join(outside, "keep.txt"), "utf8")).toBe("kept\n");
    } finally {
      tmp.cleanup();
    }
  });
});

describe("the live stream of a run deleted and started again under its id", () => {
  const dir = tempDir("cairn-mends-findings-");
  const quick = workflow({ name: "again-check", version: "1" }, async (ctx) => {
    await ctx.step("only", () => 1);
  });
  const store = sqliteStore(join(dir.dir, "cairn.db"));
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({ store, workflows: [quick], pollIntervalMs: 10 });
    await engine.start(quick, undefined, { id: "again" });
    await until(async () => (await engine.getRun("again"))?.status === "completed", "done");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  const read = (res: Response) => {
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    const s = { text: "", ended: false, reader, done: Promise.resolve() };
    s.done = (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        s.text += decoder.decode(value, { stream: true });
      }
      s.ended = true;
    })();
    return s;
  };

  // The "run" {run: null} a watcher read when the run was deleted stays in its replay
  // ring. A client that reconnects with a Last-Event-ID from before the deletion (an
  // EventSource after a network blip) is replayed that event, and its stream was ended on
  // it, though the run exists again: the stream of a live, existing run ended. Ending only
  // when the store confirms the run is gone keeps it open.
  it("a replayed deletion does not end the stream of the run started again", async () => {
    const app = createHttpApp({ engine, pollIntervalMs: 10 });
    try {
      const first = read(await app.fetch(new Request("http://localhost/api/live/runs/again")));
      await until(() => first.text.includes("event: snapshot"), "the snapshot");
      const before = /^id: (.+)$/m.exec(first.text)?.[1];
      expect(before).toBeDefined();
      expect(await store.deleteRun("again")).toMatchObject({ deleted: true });
      await until(() => first.ended, "the stream of the deleted run ends");
      await first.done;
      await engine.start(quick, undefined, { id: "again" });
      await until(async () => (await engine.getRun("again"))?.status === "completed", "again");
      const res = await app.fetch(
        new Request("http://localhost/api/live/runs/again", {
          headers: { "last-event-id": before! },
        }),
      );
      expect(res.status).toBe(200);
      const second = read(res);
      await until(
        () => second.text.includes('"id":"again"') || second.ended,
        "the run shown, or the stream ended",
      );
      expect(second.ended).toBe(false);
      await second.reader.cancel();
      await second.done;
    } finally {
      app.close();
    }
  });
});
