// replay-journal-end-swap-findings' first case with A's own work a request answered after
// 1.5 s instead of a file read and a 500 ms timer. The held hand-over keeps the hold while the
// workflow's own work may still make calls (Context.doubtfulCall). A socket counted as
// pending only for the late-work grace (1 s): the hold ended with A's request still pending,
// B (whose timer won the race the first run's q won) was handed A's record ("b=a") and
// performed its effect with it ("b sent a") before A came and the run was refused: a silent
// swap with a side effect, on both backends. Mended: late-work.ts counts the socket while its
// handle is open and ref'd (handle-work.ts), so the hold lasts until A's request is answered.

import { createServer, get } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { journalEndSwap, REFUSED_UNSWAPPED } from "./helpers/crash-replay.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

let port = 0;
const server = createServer((_req, res) => {
  setTimeout(() => res.end("slow"), 1500);
});
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => {
  server.close();
});
const slow = () =>
  new Promise<string>((resolve, reject) => {
    get({ host: "127.0.0.1", port, path: "/slow", agent: false }, (res) => {
      res.resume();
      res.on("end", () => resolve("slow"));
    }).on("error", reject);
  });

describe.each(BACKENDS)(
  "%s: a swap at the end of a journal, own work a slow request",
  (backend) => {
    const harness = useHarness(backend);

    it("a late call taking a held record is not handed its value while another call of the name may come", async () => {
      expect(await journalEndSwap(harness(), "journal-end-network-swap", slow)).toEqual(
        REFUSED_UNSWAPPED,
      );
    }, 30_000);
  },
);
