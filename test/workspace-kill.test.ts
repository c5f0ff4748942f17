// Workspaces against real process death (SIGKILL of a child worker), on both backends:
// - killed right after an edit step is recorded, the run is taken over by a worker whose
//   workspace is an empty directory on another path: before the next step runs, that
//   directory equals, byte for byte, the tree the edit left (contents, modes, symlinks,
//   deletions, a file turned directory);
// - killed halfway through an edit, the run is taken over in the same (now dirty)
//   directory: the step runs again from the last recorded checkpoint, not from the
//   half-edited tree; ignored content (node_modules) is left alone.

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { IGNORED, seedRepo } from "./fixtures/workspace-child.js";
import { spawnFixture } from "./helpers/child.js";
import { BACKENDS, pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDir } from "./helpers/sqlite.js";
import { type TreeEntry, treeOf } from "./helpers/tree.js";

const cleanups: Array<() => void | Promise<void>> = [];
afterAll(async () => {
  for (const c of cleanups.splice(0)) await c();
});

function storeSpec(backend: string): string {
  const { dir, cleanup } = tempDir("cairn-ws-kill-");
  cleanups.push(cleanup);
  if (backend === "sqlite") return `sqlite:${join(dir, "cairn.db")}`;
  const { schema, drop } = testSchema(pgUrl!);
  cleanups.push(drop);
  return `pg:${pgUrl}#${schema}`;
}

function dirs() {
  const { dir, cleanup } = tempDir("cairn-ws-kill-dirs-");
  cleanups.push(cleanup);
  return {
    a: join(dir, "machine-a/repo"),
    b: join(dir, "machine-b/elsewhere/repo"),
    ledger: join(dir, "ledger"),
  };
}

function ledger(
  path: string,
): Array<{ pid: number; attempt: number; tree: Record<string, TreeEntry> }> {
  return readFileSync(path, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

function worker(spec: string, kill: string, env: Record<string, string>) {
  return spawnFixture("workspace-child.ts", [spec, "run-ws", kill], env).done;
}

describe.each(BACKENDS)("workspace kill tests on %s", (backend) => {
  it("killed after an edit step, resumed in an empty directory on another path: the tree is restored byte for byte", async () => {
    const spec = storeSpec(backend);
    const { a, b, ledger: ledgerPath } = dirs();
    seedRepo(a);
    const before = treeOf(a, IGNORED);
    const first = await worker(spec, "after-edit", { WS_DIR: a, WS_LEDGER: ledgerPath });
    expect(first.signal, first.stderr).toBe("SIGKILL");
    const atEdit = treeOf(a, IGNORED);
    expect(atEdit).not.toEqual(before);
    expect(atEdit["old.txt"]).toBeUndefined();
    expect(atEdit["thing/inner.txt"]).toBeDefined();
    expect(existsSync(b)).toBe(false);

    const second = await worker(spec, "none", { WS_DIR: b, WS_LEDGER: ledgerPath });
    expect(second.code, second.stderr).toBe(0);
    const entries = ledger(ledgerPath);
    expect(entries).toHaveLength(1); // the first worker died before "edit2"
    const entry = entries[0];
    // What the next step started from on the other machine: exactly the edited tree.
    expect(entry?.tree).toEqual(atEdit);
    expect(entry?.tree.link).toEqual({ type: "symlink", target: "src/index.ts" });
    expect(entry?.tree.dangling).toEqual({ type: "symlink", target: "nope/missing" });
    expect(entry?.tree["bin/run.sh"]).toMatchObject({ mode: "700" });
    expect(entry?.tree.docs).toEqual({ type: "dir", mode: "700" });
    // Ignored content belongs to no checkpoint: it is not carried to the other machine.
    expect(existsSync(join(b, "node_modules"))).toBe(false);
    const final = JSON.parse(second.stdout) as Record<string, TreeEntry>;
    expect(final).toEqual(treeOf(b, IGNORED));
    expect(
      Buffer.from((final["src/index.ts"] as { content: string }).content, "base64").toString(),
    ).toBe("export const x = 3;\n");
  });

  it("killed halfway through an edit: the step runs again from the last recorded checkpoint", async () => {
    const spec = storeSpec(backend);
    const { a, ledger: ledgerPath } = dirs();
    seedRepo(a);
    const first = await worker(spec, "none", { WS_DIR: a, WS_LEDGER: ledgerPath, KILL_MID: "1" });
    expect(first.signal, first.stderr).toBe("SIGKILL");
    const [started] = ledger(ledgerPath);
    // The directory is half-edited now.
    expect(treeOf(a, IGNORED)).not.toEqual(started?.tree);
    expect(existsSync(join(a, "junk.txt"))).toBe(true);

    const second = await worker(spec, "none", { WS_DIR: a, WS_LEDGER: ledgerPath });
    expect(second.code, second.stderr).toBe(0);
    const [, again] = ledger(ledgerPath);
    expect(again?.attempt).toBe(2); // the killed attempt counts (WORKER_LOST)
    expect(again?.tree).toEqual(started?.tree);
    expect(existsSync(join(a, "junk.txt"))).toBe(false);
    expect(readFileSync(join(a, "node_modules/pkg/index.js"), "utf8")).toBe(
      "module.exports = 1;\n",
    );
    expect(JSON.parse(second.stdout)).toEqual(treeOf(a, IGNORED));
  });
});
