// `tsx bench/sqlite-wal.ts [runs]`: what a run writes to the SQLite WAL, counted, not timed
// (the counts hold on a loaded machine). Runs 0-step and 20-step runs one after another
// through the public API on a temp-dir file store (WAL, synchronous=FULL), with a reader
// holding a snapshot from the start so the WAL is never restarted (it only grows), then
// parses the frames the runs appended: commits, frames, bytes, and which B-tree (table or
// index, by dbstat) each frame's page belongs to.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { cairn } from "./cairn.js";
import { tempDir } from "./lib.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;
const runs = Number(process.argv[2] ?? 50);

interface Frame {
  page: number;
  commit: boolean;
}

/** The frames of the WAL file from byte `from` on (a frame: 24-byte header, then a page). */
function framesFrom(walPath: string, from: number, pageSize: number): Frame[] {
  const buf = readFileSync(walPath);
  const frames: Frame[] = [];
  for (let at = from; at + 24 + pageSize <= buf.length; at += 24 + pageSize) {
    frames.push({ page: buf.readUInt32BE(at), commit: buf.readUInt32BE(at + 4) !== 0 });
  }
  return frames;
}

function walSize(walPath: string): number {
  try {
    return readFileSync(walPath).length;
  } catch {
    return 0;
  }
}

const tmp = tempDir();
const path = join(tmp.dir, "wal.db");
const walPath = `${path}-wal`;
const engine = createEngine({ store: sqliteStore(path), workflows: [loop], concurrency: 10 });
try {
  // Warm: the schema is in place, the first pages of each B-tree exist.
  for (let i = 0; i < 20; i++) await (await engine.start(loop, { steps: 2 })).result();
  const reader = new Database(path, { readonly: true });
  const pageSize = reader.pragma("page_size", { simple: true }) as number;
  reader.exec("BEGIN");
  reader.prepare("SELECT count(*) FROM runs").get();
  const census = async (steps: number): Promise<string> => {
    const from = walSize(walPath);
    for (let i = 0; i < runs; i++) {
      const out = await (await engine.start(loop, { steps })).result();
      if (out !== expectedSum(steps)) throw new Error(`sqlite-wal: a run returned ${out}`);
    }
    const frames = framesFrom(walPath, Math.max(from, 32), pageSize);
    const names = new Database(path, { readonly: true });
    const owner = new Map<number, string>();
    for (const r of names.prepare("SELECT name, pageno FROM dbstat").all() as Array<{
      name: string;
      pageno: number;
    }>) {
      owner.set(r.pageno, r.name);
    }
    names.close();
    const byTree = new Map<string, number>();
    for (const f of frames) {
      const name = owner.get(f.page) ?? (f.page === 1 ? "header" : `page ${f.page}`);
      byTree.set(name, (byTree.get(name) ?? 0) + 1);
    }
    const commits = frames.filter((f) => f.commit).length;
    const per = (n: number) => (n / runs).toFixed(2);
    return (
      `${steps}-step run: ${per(commits)} commits, ${per(frames.length)} frames, ` +
      `${per(frames.length * (24 + pageSize))} WAL bytes per run; frames per run by B-tree: ` +
      [...byTree]
        .sort((a, b) => b[1] - a[1])
        .map(([name, n]) => `${name} ${per(n)}`)
        .join(", ")
    );
  };
  console.log(await census(0));
  console.log(await census(20));
  reader.exec("COMMIT");
  reader.close();
} finally {
  await engine.close();
  tmp.cleanup();
}
