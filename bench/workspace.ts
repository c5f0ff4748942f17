// The workspace section: what ctx.workspace costs on a 2,000-file repository (about 3 MB
// of synthetic source text in 100 directories), on SQLite and, when reachable, PostgreSQL. Each
// round uses a fresh store and identical copies of the repository:
// - opening the workspace: the base checkpoint (every file read, hashed, compressed and
//   stored once);
// - a workspace step that edits 3 files, beside the same edit in a plain ctx.step (the raw
//   floor; the difference is the checkpoint: the walk of the tree before the body, the walk
//   after it, 3 files hashed, 3 blobs and the trees on their paths stored);
// - bytes stored per such step; bytes a second run on an identical repository stores for
//   its base (its content is stored already);
// - a resume on another machine: restoring the 2,000 files into an empty directory, beside
//   writing the same files from memory.

import { lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import pg from "pg";
import { decode } from "../src/codec/codec.js";
import type { Store } from "../src/index.js";
import type { WorkspaceObject } from "../src/store/workspace-records.js";
import { restoreTo } from "../src/workspace/restore.js";
import { baseRules, StatCache } from "../src/workspace/scan.js";
import { fromObject, readTrees } from "../src/workspace/tree.js";
import { cairn, cairnPostgres } from "./cairn.js";
import { fmt, median, now, type Row, type Section, type SectionReport, tempDir } from "./lib.js";

const { createEngine, sqliteStore, workflow } = cairn;
const { postgresStore } = cairnPostgres;

const FILES = 2_000;
const DIRS = 100;
const STEPS = 20;
const ROUNDS = 3;

/** A deterministic repository of FILES files in DIRS directories. */
function makeRepo(dir: string): { bytes: number; paths: string[] } {
  let seed = 42;
  const rand = () => {
    seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0;
    return seed / 2 ** 32;
  };
  const words = ["const", "let", "return", "function", "import", "export", "value", "await", "if"];
  const paths: string[] = [];
  let bytes = 0;
  for (let i = 0; i < FILES; i++) {
    const d = i % DIRS;
    const sub = `pkg-${d % 10}/mod-${d}`;
    mkdirSync(join(dir, sub), { recursive: true });
    const lines: string[] = [];
    const n = 10 + Math.floor(rand() * 40);
    for (let l = 0; l < n; l++) {
      // Keywords and made-up identifiers: compresses about as well as real source.
      const w = Array.from({ length: 3 }, () => words[Math.floor(rand() * words.length)]);
      const id = () => Math.floor(rand() * 36 ** 5).toString(36);
      lines.push(`${w.join(" ")} ${id()} = ${id()}(${id()}, ${Math.floor(rand() * 1e4)});`);
    }
    const text = `${lines.join("\n")}\n`;
    const path = `${sub}/file-${i}.ts`;
    writeFileSync(join(dir, path), text);
    paths.push(path);
    bytes += Buffer.byteLength(text);
  }
  return { bytes, paths };
}

/** A store that remembers every object put through it. */
function counting(store: Store): { store: Store; puts: WorkspaceObject[] } {
  const puts: WorkspaceObject[] = [];
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === "putWorkspaceObjects") {
        return (p: Parameters<Store["putWorkspaceObjects"]>[0]) => {
          puts.push(...p.objects);
          return target.putWorkspaceObjects(p);
        };
      }
      const value = Reflect.get(target, prop, receiver);
      // Bound: the PostgreSQL store keeps its state in private fields.
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { store: proxy, puts };
}

const bytesOf = (objects: WorkspaceObject[]) => objects.reduce((n, o) => n + o.data.byteLength, 0);

interface Input {
  dir: string;
  paths: string[];
  steps: number;
  /** Workspace steps (true) or plain steps doing the same edits. */
  workspace: boolean;
}

/** Per run: [ms to open the workspace, then performance.now() at each step body's start]. */
const marks = new Map<string, number[]>();

const editLoop = workflow({ name: "bench-workspace", version: "1" }, async (ctx, input: Input) => {
  const m: number[] = [];
  marks.set(ctx.runId, m);
  const t0 = performance.now();
  const ws = input.workspace ? await ctx.workspace("repo", { dir: input.dir }) : undefined;
  m.push(performance.now() - t0);
  for (let i = 0; i < input.steps; i++) {
    const edit = () => {
      m.push(performance.now());
      for (let k = 0; k < 3; k++) {
        const file = join(input.dir, input.paths[((i * 3 + k) * 37) % input.paths.length]!);
        writeFileSync(file, `${readFileSync(file, "utf8")}// step ${i} edit ${k}\n`);
      }
    };
    if (ws) await ws.step("edit", edit);
    else await ctx.step("edit", edit);
  }
  m.push(performance.now());
  return input.steps;
});

/** Median time from one step body's start to the next's (a whole step cycle). */
function stepCycle(runId: string): number {
  const starts = marks.get(runId)!.slice(1);
  return median(starts.slice(1).map((t, i) => t - starts[i]!));
}

/** readdir + lstat of every entry: the floor of any walk of the tree. */
function rawWalk(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    lstatSync(p);
    n++;
    if (e.isDirectory()) n += rawWalk(p);
  }
  return n;
}

/** Restores a run's last workspace checkpoint into `dir`, reading the store alone. */
async function restoreInto(store: Store, runId: string, dir: string): Promise<void> {
  const journal = await store.loadJournal(runId);
  const last = [...journal.steps].sort((a, b) => (b.delivery ?? 0) - (a.delivery ?? 0))[0];
  const root = decode<{ checkpoint: string }>(last?.result ?? "").checkpoint;
  const fetch = async (hashes: string[]) => {
    const out = new Map<string, Buffer>();
    for (let i = 0; i < hashes.length; i += 500) {
      for (const o of await store.getWorkspaceObjects(hashes.slice(i, i + 500))) {
        out.set(o.hash, fromObject(o));
      }
    }
    return out;
  };
  const { snapshot } = await readTrees(root, fetch);
  await restoreTo(dir, snapshot, {
    rules: baseRules({}),
    gitignore: true,
    cache: new StatCache(),
    fetchBlobs: fetch,
  });
}

async function measure(
  label: string,
  freshStore: (round: number) => Store,
  report: SectionReport,
): Promise<void> {
  const tmp = tempDir("cairn-bench-ws-");
  const f = {
    base: [] as number[],
    baseBytes: [] as number[],
    secondBaseBytes: [] as number[],
    wsStep: [] as number[],
    plainStep: [] as number[],
    stepBytes: [] as number[],
    restore: [] as number[],
    rawWrite: [] as number[],
    walk: [] as number[],
  };
  let repoBytes = 0;
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const dir = (name: string) => join(tmp.dir, `${round}-${name}`);
      const { bytes, paths } = makeRepo(dir("open"));
      for (const name of ["steps", "plain"]) makeRepo(dir(name));
      repoBytes = bytes;
      const c = counting(freshStore(round));
      const engine = createEngine({ store: c.store, workflows: [editLoop], pollIntervalMs: 50 });
      try {
        const opened = await engine.start(editLoop, {
          dir: dir("open"),
          paths,
          steps: 0,
          workspace: true,
        });
        await opened.result();
        f.base.push(marks.get(opened.id)![0]!);
        f.baseBytes.push(bytesOf(c.puts));

        // Same repository again: its base is stored already, so what it stores is its steps.
        let from = c.puts.length;
        const stepped = await engine.start(editLoop, {
          dir: dir("steps"),
          paths,
          steps: STEPS,
          workspace: true,
        });
        await stepped.result();
        f.wsStep.push(stepCycle(stepped.id));
        f.stepBytes.push(bytesOf(c.puts.slice(from)) / STEPS);

        const plain = await engine.start(editLoop, {
          dir: dir("plain"),
          paths,
          steps: STEPS,
          workspace: false,
        });
        await plain.result();
        f.plainStep.push(stepCycle(plain.id));

        from = c.puts.length;
        makeRepo(dir("again"));
        const again = await engine.start(editLoop, {
          dir: dir("again"),
          paths,
          steps: 0,
          workspace: true,
        });
        await again.result();
        f.secondBaseBytes.push(bytesOf(c.puts.slice(from)));

        const t0 = now();
        await restoreInto(c.store, stepped.id, dir("restored"));
        f.restore.push(now() - t0);
        const contents = paths.map((p) => readFileSync(join(dir("restored"), p)));
        const t1 = now();
        for (let i = 0; i < paths.length; i++) {
          const file = join(dir("raw"), paths[i]!);
          mkdirSync(dirname(file), { recursive: true });
          writeFileSync(file, contents[i]!);
        }
        f.rawWrite.push(now() - t1);
        const t2 = now();
        rawWalk(dir("raw"));
        f.walk.push(now() - t2);
      } finally {
        await engine.close();
      }
    }
  } finally {
    tmp.cleanup();
  }
  const row = (name: string, unit: string, cairn: number[], raw?: number[]): Row => ({
    name: `${label}: ${name}`,
    unit,
    cairn: median(cairn),
    raw: raw ? median(raw) : undefined,
    better: "lower",
  });
  report.rows.push(
    row(`open a ${FILES}-file workspace (base checkpoint)`, "ms", f.base),
    row("a step editing 3 files (raw: plain ctx.step)", "ms/step", f.wsStep, f.plainStep),
    row("bytes stored per such step", "bytes", f.stepBytes),
    row(`restore ${FILES} files into an empty dir`, "ms", f.restore, f.rawWrite),
  );
  report.notes.push(
    `${label}: a workspace step walks the tree twice (before its body: is the directory still its checkpoint? after: what changed); one bare walk (readdir + lstat of every entry) takes ${fmt(median(f.walk))} ms on this machine`,
    `${label}: the repository holds ${fmt(repoBytes / 1e6)} MB; its base checkpoint stored ${fmt(median(f.baseBytes) / 1e6)} MB (compressed); a second run on an identical copy stored ${fmt(median(f.secondBaseBytes))} bytes for its base`,
  );
}

export function workspaceSection(): Section {
  const title = `Workspace checkpoints (${FILES}-file repository, ${STEPS} steps a run, ${ROUNDS} rounds)`;
  return {
    title,
    async run() {
      const report: SectionReport = { title, rows: [], notes: [] };
      const db = tempDir("cairn-bench-ws-db-");
      try {
        await measure("SQLite", (r) => sqliteStore(join(db.dir, `cairn-${r}.db`)), report);
      } finally {
        db.cleanup();
      }
      const url =
        process.env.CAIRN_BENCH_POSTGRES_URL ||
        process.env.CAIRN_TEST_POSTGRES_URL ||
        "postgres://postgres@127.0.0.1:5432/test";
      const schemas: string[] = [];
      try {
        await measure(
          "PostgreSQL",
          (r) => {
            const schema = `cairn_bench_ws_${Date.now().toString(36)}_${r}`;
            schemas.push(schema);
            return postgresStore(url, { schema });
          },
          report,
        );
      } catch (err) {
        report.notes.push(`PostgreSQL skipped: ${(err as Error).message}`);
      } finally {
        const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
        client.on("error", () => {});
        try {
          await client.connect();
          for (const s of schemas) await client.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
        } catch {
          // Nothing to drop when the server is unreachable.
        } finally {
          await client.end().catch(() => {});
        }
      }
      return report;
    },
  };
}
