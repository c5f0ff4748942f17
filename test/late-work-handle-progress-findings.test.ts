// late-work.ts's takeActivity (a cascade that may continue code joined with work of the
// workflow's own: its calls have no fixed window) counts a handle when its callbacks ran (it
// closed, or read or wrote bytes), not for being open. Before (29d4867), any open ref'd
// handle counted: a client connection the workflow keeps for the run's life tainted every
// cascade, and a name reused after I/O was refused on the first run (replay-kept-connection-findings).

import { once } from "node:events";
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runAtRoot } from "../src/workflow/call-scope.js";
import { trackLateWork } from "../src/workflow/late-work.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Past a 1 ms grace and the loop turns other work counts for (OTHER_WORK_TURNS is 8). */
async function graceOver(): Promise<void> {
  await delay(5);
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

const accepted: Socket[] = [];
const server = createServer((s) => accepted.push(s));
let port = 0;
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => {
  for (const s of accepted) s.destroy();
  server.close();
});

describe("late work: a kept connection", () => {
  it("taints a cascade after it moved bytes or closed, not for idling open", async () => {
    const owner = {};
    const { work, stop } = trackLateWork(owner);
    try {
      const before = accepted.length;
      const socket = runAtRoot(owner, () => connect(port, "127.0.0.1"));
      await once(socket, "connect");
      while (accepted.length === before) await delay(5);
      await graceOver();
      work.takeActivity(1);
      // Open, ref'd and idle: still pending for a replay's hold, no activity.
      expect(work.busyForMs(1)).toBeGreaterThan(0);
      expect(work.takeActivity(1)).toBe(false);
      // An answer arrives: its callbacks ran.
      accepted[accepted.length - 1]!.write("answer");
      await once(socket, "data");
      await graceOver();
      expect(work.takeActivity(1)).toBe(true);
      expect(work.takeActivity(1)).toBe(false);
      socket.destroy();
      await once(socket, "close");
      expect(work.takeActivity(1)).toBe(true);
      expect(work.busyForMs(1)).toBe(0);
    } finally {
      stop();
    }
  });
});
