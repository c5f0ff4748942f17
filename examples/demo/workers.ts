// The demo's child processes: workers (examples/demo/worker.ts) and the cairn CLI. A
// worker's stdout is JSON lines (ledger.ts); each is kept and handed to `onEvent` as it
// arrives. No child outlives the demo: `killAll` on any exit.

import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { DemoEvent } from "./ledger.js";
import type { WorkerConfig } from "./worker.js";

export const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));
const WORKER = fileURLToPath(new URL("./worker.ts", import.meta.url));
const CLI = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));

const live = new Set<ChildProcess>();

export function killAll(): void {
  for (const child of live) child.kill("SIGKILL");
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface WorkerProcess {
  n: number;
  pid: number;
  child: ChildProcess;
  events: DemoEvent[];
  stderr: string[];
  /** Resolves when the process is gone and its output is read. */
  closed: Promise<Exit>;
}

export function spawnWorker(config: WorkerConfig, onEvent: (e: DemoEvent) => void): WorkerProcess {
  const child = spawn(process.execPath, ["--import", "tsx", WORKER, JSON.stringify(config)], {
    cwd: REPO_ROOT,
    stdio: ["ignore", "pipe", "pipe", "ipc"],
  });
  live.add(child);
  const events: DemoEvent[] = [];
  const stderr: string[] = [];
  createInterface({ input: child.stdout! }).on("line", (line) => {
    let event: DemoEvent;
    try {
      event = JSON.parse(line) as DemoEvent;
    } catch {
      stderr.push(line);
      return;
    }
    events.push(event);
    onEvent(event);
  });
  createInterface({ input: child.stderr! }).on("line", (line) => stderr.push(line));
  return { n: config.worker, pid: child.pid ?? 0, child, events, stderr, closed: closed(child) };
}

/** Runs `cairn <args>` (src/cli/main.ts) in a child process; resolves with its output. */
export async function runCli(args: string[]): Promise<Exit & { stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", CLI, ...args], {
    cwd: REPO_ROOT,
    stdio: ["ignore", "pipe", "pipe"],
  });
  live.add(child);
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => {
    stdout += d;
  });
  child.stderr.on("data", (d) => {
    stderr += d;
  });
  return { ...(await closed(child)), stdout, stderr };
}

function closed(child: ChildProcess): Promise<Exit> {
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });
}

/** `p`, or a rejection naming `what` after `ms`. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms / 1000} s`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
