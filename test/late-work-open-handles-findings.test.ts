// late-work.ts counts a child process and a socket the workflow code began as pending for as
// long as their handles are open and ref'd (handle-work.ts), not only for the grace a file
// read gets. Judged with a grace of 1 ms, once more loop turns than OTHER_WORK_TURNS have
// passed: before handle-work.ts, everything here but a timer read as over by then (so a
// replay's hold ended while a command or a request of the workflow's own still ran). A
// suspension still waits for them only for the grace (holdsRunForMs).
// An idle socket in a keep-alive agent's pool (unref'd by the agent) must not count: every
// replay that holds would wait replayStallMs for it.

import { spawn } from "node:child_process";
import { once } from "node:events";
import { Agent, createServer, get, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runAtRoot } from "../src/workflow/call-scope.js";
import { trackLateWork } from "../src/workflow/late-work.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Past a 1 ms grace and the loop turns other work counts for (OTHER_WORK_TURNS is 8). */
async function graceOver(): Promise<void> {
  await delay(5);
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

const held: ServerResponse[] = [];
let port = 0;
const server = createServer((req, res) => {
  if (req.url === "/held") held.push(res);
  else res.end("quick");
});
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => {
  for (const res of held) res.end();
  server.closeAllConnections();
  server.close();
});

function request(path: string, agent: Agent | false): Promise<string> {
  return new Promise((resolve, reject) => {
    get({ host: "127.0.0.1", port, path, agent }, (res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c.toString()));
      res.on("end", () => resolve(body));
    }).on("error", reject);
  });
}

describe("late work: handles", () => {
  it("a child process counts while it runs, and not once it has exited", async () => {
    const owner = {};
    const { work, stop } = trackLateWork(owner);
    try {
      const child = runAtRoot(owner, () => spawn("sleep", ["30"]));
      const closed = once(child, "close");
      await graceOver();
      expect(work.busyForMs(1)).toBeGreaterThan(0);
      // A suspension does not wait for it past the grace (a hung one would pin the run).
      expect(work.holdsRunForMs(1)).toBe(0);
      child.kill();
      await closed;
      await until(() => work.busyForMs(1) === 0, "the exited child no longer counts");
    } finally {
      stop();
    }
  });

  it("an unref'd child process does not count (it said it must not keep the program alive)", async () => {
    const owner = {};
    const { work, stop } = trackLateWork(owner);
    const child = runAtRoot(owner, () => spawn("sleep", ["30"], { stdio: "ignore" }));
    try {
      child.unref();
      await graceOver();
      expect(work.busyForMs(1)).toBe(0);
    } finally {
      child.kill();
      stop();
    }
  });

  it("a socket counts while its request is answered slowly, and not once it is closed", async () => {
    const owner = {};
    const { work, stop } = trackLateWork(owner);
    try {
      const before = held.length;
      const answer = runAtRoot(owner, () => request("/held", false));
      await until(() => held.length > before, "the server holds the request");
      await graceOver();
      expect(work.busyForMs(1)).toBeGreaterThan(0);
      held[held.length - 1]!.end("late");
      expect(await answer).toBe("late");
      await until(() => work.busyForMs(1) === 0, "the closed socket no longer counts");
    } finally {
      stop();
    }
  });

  it("an idle socket in a keep-alive pool does not count; a request reusing it does", async () => {
    const agent = new Agent({ keepAlive: true });
    const owner = {};
    const { work, stop } = trackLateWork(owner);
    try {
      expect(await runAtRoot(owner, () => request("/quick", agent))).toBe("quick");
      await until(() => Object.keys(agent.freeSockets).length > 0, "the socket is pooled");
      await graceOver();
      // Open, in the pool, unref'd by the agent: no work of the run's.
      expect(Object.values(agent.freeSockets).flat()[0]?.destroyed).toBe(false);
      expect(work.busyForMs(1)).toBe(0);
      expect(work.holdsRunForMs(1)).toBe(0);
      // Reused (http's ReusedHandle) and ref'd again for a request held by the server.
      const before = held.length;
      const answer = runAtRoot(owner, () => request("/held", agent));
      await until(() => held.length > before, "the server holds the request");
      await graceOver();
      expect(work.busyForMs(1)).toBeGreaterThan(0);
      held[held.length - 1]!.end("late");
      expect(await answer).toBe("late");
      await until(() => work.busyForMs(1) === 0, "the socket is idle in the pool again");
      expect(Object.keys(agent.freeSockets).length).toBeGreaterThan(0);
    } finally {
      agent.destroy();
      stop();
    }
  });
});
