// A PostgreSQL cluster of this test's own (initdb in a temp dir, on a free port), so that a
// test may restart the server without touching the shared one others use. Started as the
// postgres user when this process is root (the server refuses to run as root).

import { execFile } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
export const PG_BIN = process.env.CAIRN_PG_BIN ?? "/usr/lib/postgresql/15/bin";

export function privateClusterAvailable(): boolean {
  return existsSync(join(PG_BIN, "initdb")) && existsSync(join(PG_BIN, "pg_ctl"));
}

export interface PrivateCluster {
  url: string;
  /** pg_ctl restart (fast shutdown: every connection is cut), waiting until it accepts
   *  connections again. */
  restart(): Promise<void>;
  /** Stops the server and removes its directory. */
  destroy(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

export async function startPrivateCluster(): Promise<PrivateCluster> {
  const dir = mkdtempSync(join(tmpdir(), "cairn-pg-"));
  const data = join(dir, "data");
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { stdout } = await run("id", ["-u", "postgres"]);
    const { stdout: g } = await run("id", ["-g", "postgres"]);
    chownSync(dir, Number(stdout.trim()), Number(g.trim()));
  }
  const pg = (bin: string, args: string[]) =>
    asRoot
      ? run("runuser", ["-u", "postgres", "--", join(PG_BIN, bin), ...args], { cwd: dir })
      : run(join(PG_BIN, bin), args, { cwd: dir });
  await pg("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
  const port = await freePort();
  const opts = [
    `-p ${port}`,
    `-k ${dir}`,
    "-c listen_addresses=127.0.0.1",
    "-c fsync=off",
    "-c synchronous_commit=off",
    "-c full_page_writes=off",
    "-c max_connections=300",
  ].join(" ");
  const ctl = (args: string[]) =>
    pg("pg_ctl", [
      "-D",
      data,
      "-o",
      opts,
      "-l",
      join(dir, "server.log"),
      "-w",
      "-t",
      "60",
      ...args,
    ]);
  await ctl(["start"]);
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    restart: async () => {
      await ctl(["restart", "-m", "fast"]);
    },
    destroy: async () => {
      await ctl(["stop", "-m", "immediate"]).catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
