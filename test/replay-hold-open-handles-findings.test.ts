// A replay's hold waits for a command or a request of the workflow's own for as long as it
// runs (late-work.ts counts its handle while open and ref'd), so a correct program whose call
// comes after such work, later than the late-work grace (1 s), is not refused; and a socket
// left idle in a keep-alive pool does not keep a held replay waiting (replayStallMs set far
// past the test's timeout: were it counted, the test would time out).
//
// The program of replay-holds-delivery-for-missing-call-findings: "m" is joined with work of
// the workflow's own and then x ("a") is called; "s" is handed over next and its code calls x
// ("b"). The first run's own work is done before "m"; the replay's takes longer, so "m"'s
// cascade ends without "a"'s call and the replay holds "s" back until it comes. Before the
// handles were counted, the command's or request's hold ended with its grace, 0.8 s before the
// call: the run was refused, a correct program.

import { execFile } from "node:child_process";
import { Agent, createServer, get } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { callAfterOwnWork, delay } from "./helpers/replay-at-go.js";

const command = () => new Promise<void>((r) => execFile("sleep", ["1.5"], () => r()));

let port = 0;
const server = createServer((req, res) => {
  if (req.url === "/slow") setTimeout(() => res.end("slow"), 1500);
  else res.end("quick");
});
// Idle connections stay open (the default closes them after 5 s, which would end the wait).
server.keepAliveTimeout = 0;
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => {
  server.closeAllConnections();
  server.close();
});
const keepAlive = new Agent({ keepAlive: true });
afterAll(() => keepAlive.destroy());
const request = (path: string, agent: Agent | false) =>
  new Promise<void>((resolve, reject) => {
    get({ host: "127.0.0.1", port, path, agent }, (res) => {
      res.resume();
      res.on("end", () => resolve());
    }).on("error", reject);
  });

const ownWorks: Array<[string, () => Promise<unknown>]> = [
  ["a command (1.5 s)", command],
  ["a request answered after 1.5 s", () => request("/slow", false)],
  // A quick request leaves its socket idle in the pool; the timer keeps the hold on.
  ["a keep-alive request, then a timer", () => request("/quick", keepAlive).then(() => delay(300))],
];

describe.each(BACKENDS)("%s: a replay held for a call after own work", (backend) => {
  const harness = useHarness(backend);

  it.each(ownWorks)(
    "waits for %s, and the program completes",
    async (_name, replayWork) => {
      // replayStallMs far past the test's timeout: a hold that never ends times the test out.
      const replayed = await callAfterOwnWork(harness(), "held-for-handle", replayWork, {
        replayStallMs: 3_600_000,
      });
      expect(replayed).toEqual({ got: ["a=a", "b=b"], outcome: "done" });
    },
    30_000,
  );
});
