// NOT MENDED (it.fails until it is). replay-journal-end-swap-findings' first case with A's own work
// a request answered after 2.5 s instead of a file read and a 1 s timer. The held hand-over
// keeps the hold while the workflow's own work may still make calls (Context.doubtfulCall),
// but a socket counts as pending only for the late-work grace (1 s, late-work.ts): the hold
// ends with A's request still pending, B (whose timer won the race the first run's q won) is
// handed A's record ("b=a") and performs its effect with it ("b sent a") before A comes and
// the run is refused. A silent swap with a side effect, on both backends. Pre-existing (not
// from the late-call loosening): the verdict rests on the grace seeing all the work.

import { createServer, get } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const never = () => new Promise<never>(() => {});
let port = 0;
const server = createServer((_req, res) => {
  setTimeout(() => res.end("slow"), 2500);
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

    it.fails("a late call taking a held record is not handed its value while another call of the name may come", async () => {
      const h = harness();
      let firstRun = true;
      let crashed = false;
      let crash = () => {};
      const got: string[] = [];
      const performed: string[] = [];
      const wf = workflow(
        { name: "journal-end-network-swap", version: "1" },
        async (ctx: WorkflowContext) => {
          const x = async (id: string) => {
            const v = await ctx.step("x", () => delay(5).then(() => id));
            got.push(`${id}=${v}`);
            return v;
          };
          const ownWork = () => (firstRun ? delay(0) : slow());
          await Promise.all([
            (async () => {
              await Promise.all([ctx.step("m", () => delay(50).then(() => "m")), ownWork()]);
              await x("a");
              // A's record is durable: the worker dies here, before q or B's x has a record.
              if (firstRun) {
                crash();
                crashed = true;
              }
            })(),
            (async () => {
              const timer = firstRun ? never() : delay(100);
              const q = ctx.step("q", () => (firstRun ? never() : delay(400).then(() => "q")));
              await Promise.race([q, timer]);
              const v = await x("b");
              await ctx.effect("send", {
                perform: () => {
                  performed.push(`b sent ${v}`);
                  return v;
                },
                reconcile: () => undefined,
              });
            })(),
          ]);
          return "done";
        },
      );
      const first = crashableEngine(h, [wf]);
      crash = first.crash;
      const run = await first.engine.start(wf, undefined);
      await until(() => crashed, "A's x is recorded and the worker dies");
      expect(got).toEqual(["a=a"]);
      got.length = 0;
      firstRun = false;
      await h.clock.advance(60_000);
      const second = h.engine([wf]);
      const out = await second
        .handle(run.id)
        .result()
        .catch((err: Error) => err);
      // No call of x was handed the other's value, and nothing was done with one.
      expect(got.filter((g) => g.split("=")[0] !== g.split("=")[1])).toEqual([]);
      expect(performed).toEqual([]);
      const steps = await second.getSteps(run.id);
      expect(steps.map((s) => `${s.key}=${s.result}`).filter((s) => s.startsWith("send"))).toEqual(
        [],
      );
      expect(out).toBeInstanceOf(Error);
      expect((out as Error).name).toBe("NonDeterminismError");
    }, 30_000);
  },
);
