// The kill storm's machinery: the worker bundled once (esbuild) so each process starts in a
// plain `node` (no TypeScript loader), a seeded random source, and a fleet of short-lived
// worker processes that a controller SIGKILLs, or stops past their lease (SIGSTOP) and
// continues (SIGCONT) before killing them.

import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const OUT_DIR = fileURLToPath(new URL("../../node_modules/.cache/cairn-storm/", import.meta.url));
const ENTRY = fileURLToPath(new URL("../fixtures/storm-worker.ts", import.meta.url));

/** Bundles test/fixtures/storm-worker.ts (once per process); returns the file to run. The
 *  bundle lives under node_modules so that its external packages resolve. */
let bundled: Promise<string> | undefined;
export function stormWorkerBundle(): Promise<string> {
  bundled ??= (async () => {
    mkdirSync(OUT_DIR, { recursive: true });
    const outdir = `${OUT_DIR}${process.pid}`;
    await build({
      entryPoints: [ENTRY],
      bundle: true,
      platform: "node",
      format: "esm",
      outExtension: { ".js": ".mjs" },
      target: "node20",
      outdir,
      splitting: true,
      external: ["better-sqlite3", "pg"],
      banner: {
        js: "import { createRequire as __cairnRequire } from 'node:module'; const require = __cairnRequire(import.meta.url);",
      },
      logLevel: "warning",
    });
    return `${outdir}/storm-worker.mjs`;
  })();
  return bundled;
}

/** Removes this process's bundle (call after the tests that used it). */
export function removeStormWorkerBundle(): void {
  rmSync(`${OUT_DIR}${process.pid}`, { recursive: true, force: true });
  bundled = undefined;
}

/** The seed of this run: CAIRN_SEED, else a random one (printed on failure). */
export function stormSeed(): number {
  const s = process.env.CAIRN_SEED;
  return s ? Number(s) >>> 0 : Math.floor(Math.random() * 2 ** 32);
}

/** mulberry32: a small seeded PRNG; returns floats in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface StormWorker {
  child: ChildProcess;
  pid: number;
  /** Loaded, store open, waiting for `go()`. */
  booted: boolean;
  /** Told to go. */
  started: boolean;
  ready: boolean;
  exited: boolean;
  stopped: boolean;
  /** Controller bookkeeping: when to act next (ms since epoch), and whether this one is
   *  to be stopped past its lease before it dies. */
  actAt: number;
  zombie: boolean;
  out: string;
  err: string;
  done: Promise<void>;
}

/** Starts a booted worker's engine. */
export function goStormWorker(w: StormWorker): void {
  w.started = true;
  w.child.stdin?.write("go\n");
}

export function spawnStormWorker(bundle: string, config: object): StormWorker {
  const child = spawn(process.execPath, [bundle, JSON.stringify(config)], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  child.stdin?.on("error", () => {});
  const w: StormWorker = {
    child,
    pid: child.pid ?? -1,
    booted: false,
    started: false,
    ready: false,
    exited: false,
    stopped: false,
    actAt: Number.POSITIVE_INFINITY,
    zombie: false,
    out: "",
    err: "",
    done: Promise.resolve(),
  };
  child.stdout?.on("data", (d) => {
    w.out += d;
    if (!w.booted && w.out.includes("booted ")) w.booted = true;
    if (!w.ready && w.out.includes("ready ")) w.ready = true;
  });
  child.stderr?.on("data", (d) => {
    if (w.err.length < 10_000) w.err += d;
  });
  w.done = new Promise((resolve) => {
    child.on("close", () => {
      w.exited = true;
      resolve();
    });
    child.on("error", () => {
      w.exited = true;
      resolve();
    });
  });
  return w;
}
