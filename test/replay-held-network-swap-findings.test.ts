// the held-record verdict ends when the workflow's own work looks done, and other work
// than timers (a socket, a file) counts only for a grace (late-work.ts): a request that takes
// longer is still pending when the hold ends. A late call that took a record made inside the
// cascade of its own window (its own request won a race the first run's outcome won) was
// handed that record, another call's; the owner, whose join with its slow request the first
// run found done inside that cascade, came in the next window and took the impostor's record,
// which the pair check let through as calls of recorded cascades apart: a silent swap.
// The first run is driven by gates, the server's answers by the test: deterministic shapes.

import { createServer, get, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { impostorAcrossWindows } from "./helpers/replay-at-go.js";

/** The server answers /slow after 1.5 s (past the late-work grace), /b when the test says. */
let port = 0;
let holdB = true;
const heldB: ServerResponse[] = [];
const server = createServer((req, res) => {
  if (req.url === "/slow") setTimeout(() => res.end("slow"), 1500);
  else if (holdB) heldB.push(res);
  else res.end("b");
});
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => {
  for (const res of heldB.splice(0)) res.end("b");
  server.close();
});

const fetchText = (path: string) =>
  new Promise<string>((resolve, reject) => {
    get({ host: "127.0.0.1", port, path, agent: false }, (res) => {
      let body = "";
      res.on("data", (c) => {
        body += c;
      });
      res.on("end", () => resolve(body));
    }).on("error", reject);
  });

describe.each(BACKENDS)("%s: a held record and a request past the grace", (backend) => {
  const harness = useHarness(backend);

  it("an impostor whose request won takes the owner's record; the owner comes in the next window", async () => {
    holdB = true;
    const { handedToB, outcome: result } = await impostorAcrossWindows(harness(), {
      name: "held-network-swap",
      ownWork: () => fetchText("/slow"),
      race: (t) => {
        // Work of the workflow's own begun in t's cascade: the replay holds that cascade's
        // verdict while it pends, and A's slow request answers meanwhile.
        void t.then(() => new Promise((r) => setTimeout(r, 2000)));
        return Promise.race([t, fetchText("/b")]);
      },
      beforeReplay: () => {
        holdB = false;
        for (const res of heldB.splice(0)) res.end("b");
      },
    });
    // B may be handed A's value here: the hold ends once A's request is past the late-work
    // grace (I/O outside steps, late-work.ts), which cairn cannot tell from done. Once it was,
    // the run must be refused when A comes, never go on with each holding the other's value.
    if (handedToB.some((v) => v !== "x by B")) expect(result).toBe("NonDeterminismError");
    else if (typeof result !== "string") expect(result).toEqual(["x by A", "x by B"]);
  }, 30_000);
});
