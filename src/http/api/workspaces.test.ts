// One file's line diff (lineDiff) against an engine that counts what it reads.

import { describe, expect, it } from "vitest";
import type { CheckpointChange, CheckpointEntry, Engine } from "../../index.js";
import { lineDiff } from "./workspaces.js";

const FROM = "a".repeat(64);
const TO = "b".repeat(64);
const HASH = "c".repeat(64);

function engineOf(content: Uint8Array): { engine: Engine; reads: string[] } {
  const reads: string[] = [];
  const engine = {
    async readWorkspaceFile(_runId: string, checkpoint: string, path: string) {
      reads.push(checkpoint);
      return { path, mode: 0o644, size: content.byteLength, hash: HASH, content };
    },
  } as unknown as Engine;
  return { engine, reads };
}

const file = (mode: number, size: number, hash = HASH): CheckpointEntry => ({
  path: "run.sh",
  type: "file",
  mode,
  size,
  hash,
});

describe("lineDiff", () => {
  it("reads a file whose mode alone changed once, and shows no lines for it", async () => {
    for (const [content, binary] of [
      [new TextEncoder().encode("echo hi\n"), false],
      [Uint8Array.from([0, 1, 2]), true],
    ] as const) {
      const { engine, reads } = engineOf(content);
      const change: CheckpointChange = {
        path: "run.sh",
        change: "modified",
        before: file(0o644, content.byteLength),
        after: file(0o755, content.byteLength),
      };
      const d = { from: FROM, to: TO, changes: [change] };
      expect(await lineDiff(engine, "run_1", d, "run.sh")).toEqual({
        path: "run.sh",
        binary,
        tooLarge: false,
        hunks: [],
      });
      expect(reads).toEqual([TO]);
    }
  });

  it("reads both sides of a file whose content changed", async () => {
    const { engine, reads } = engineOf(new TextEncoder().encode("x\n"));
    const change: CheckpointChange = {
      path: "run.sh",
      change: "modified",
      before: file(0o644, 2, "d".repeat(64)),
      after: file(0o644, 2),
    };
    await lineDiff(engine, "run_1", { from: FROM, to: TO, changes: [change] }, "run.sh");
    expect(reads.sort()).toEqual([FROM, TO]);
  });
});
