// engine.close() must end whatever state it finds, or a user's process never exits. Found
// hunting a generative replay soak that hung after its run completed (ip-pg:900364: the
// harness waiting on an in-process worker's stop, its crashable store killed by a crash
// point that a store call of close() itself reached). Three waits had no bound:
// - the store's own close(): a store that stops answering (one that died under the engine,
//   a custom store on a silent network) held close() for ever;
// - the hand-back of a run that a claim round answered with after close() began;
// - on PostgreSQL, the LISTEN connection being made: a server gone silent after accepting
//   it never answers its LISTEN, which held the store's close(), and its socket the
//   process, for ever.
// Each test failed (hung to its bound) before its mend.
//
// The three suites (SQLite, PostgreSQL, the process on PostgreSQL) run side by side: their
// time is close()'s own bounds (a stage 2 s), real time, and they share no storage. The
// store's close() is waited for 10 s at least (STORE_CLOSE_MIN_MS); the engines in this
// process pass the internal option storeCloseMinMs, so that a store that never closes costs
// each backend STORE_CLOSE_MS rather than 10 s: what is tested is that close() ends, not how
// long that bound is. The tests of one backend's suite run one after the other (its harness
// closes a test's engines after it).

import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import type { InternalEngineOptions } from "../src/engine/engine-config.js";
import { createEngine, type Store, workflow } from "../src/index.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { ROOT } from "./helpers/cli.js";
import { BACKENDS, pgUrl, useHarness } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";
import { around, gate } from "./helpers/store-verbs.js";
import { within } from "./helpers/within.js";

/** A bound that only a hang reaches (close() waits at most a few seconds per stage). */
const HANG_MS = 60_000;

/** How long the engines here wait for their store's close() at least (10 s by default). */
const STORE_CLOSE_MS = 500;

/** createEngine, with the internal option that shortens the wait for the store's close(). */
function engineOf(options: InternalEngineOptions) {
  const all: InternalEngineOptions = { storeCloseMinMs: STORE_CLOSE_MS, ...options };
  return createEngine(all);
}

describe.each(BACKENDS)("engine.close() ends (%s)", { concurrent: true }, (backend) => {
  const harness = useHarness(backend);

  it.sequential("when the store dies under close() (a hand-back of close() is its last call)", async () => {
    const h = harness();
    const stepDone = gate();
    // After its step the workflow awaits I/O of its own: close() hands the run back.
    const idles = workflow({ name: "idles", version: "1" }, async (ctx) => {
      await ctx.step("a", async () => 1);
      stepDone.open();
      await new Promise(() => {});
    });
    let closing = false;
    const store = crashableStore(h.store(), {
      crashBefore: (call) => closing && call.verb === "releaseRun",
    });
    const engine = engineOf({
      store,
      workflows: [idles],
      clock: h.clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      log: () => {},
    });
    await engine.start(idles, undefined);
    await within(stepDone.opened, HANG_MS, "the run's step");
    closing = true;
    await within(engine.close(), HANG_MS, "close()");
    expect(store.crashed).toBe(true);
    await store.settled();
  }, 120_000);

  it.sequential("when a claim answered after close() began hands its run back to a store that never answers", async () => {
    const h = harness();
    const quick = workflow({ name: "quick", version: "1" }, async (ctx) =>
      ctx.step("s", async () => 1),
    );
    const claimed = gate();
    const workerClosing = gate();
    let closing = false;
    const never = () => new Promise<never>(() => {});
    // The claim is made at once; its answer is held until the worker has begun to close
    // (it ends its store subscription first thing, before the engine ends its own).
    const store = around(subscriptionsWatched(h.store(), workerClosing.open), {
      claimRuns: async (call, ...args) => {
        const claims = (await call(...args)) as unknown[];
        if (claims.length > 0) {
          claimed.open();
          await workerClosing.opened;
        }
        return claims;
      },
      releaseRun: (call, ...args) => (closing ? never() : call(...args)),
      expireLease: (call, ...args) => (closing ? never() : call(...args)),
    });
    // leaseMs: how long the store is kept open for that hand-back after close() resolved.
    const engine = engineOf({
      store,
      workflows: [quick],
      clock: h.clock,
      pollIntervalMs: 10,
      closeGraceMs: 0,
      leaseMs: 2_000,
      log: () => {},
    });
    const starter = h.engine([quick], { worker: false });
    await starter.start(quick, undefined);
    await within(claimed.opened, HANG_MS, "the run's claim");
    closing = true;
    await within(engine.close(), HANG_MS, "close()");
  }, 120_000);
});

/** `inner`, calling `onUnsubscribe` when a subscription to its hints ends. */
function subscriptionsWatched(inner: Store, onUnsubscribe: () => void): Store {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === "subscribe") {
        return (listener: Parameters<Store["subscribe"]>[0]) => {
          const unsubscribe = target.subscribe(listener);
          return () => {
            onUnsubscribe();
            unsubscribe();
          };
        };
      }
      const value = Reflect.get(target, prop, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  }) as Store;
}

/** A TCP proxy to `base` that goes silent (a network partition: nothing passes either way,
 *  no FIN, no RST) on the connection that sends a LISTEN. */
async function silentOnListen(base: string): Promise<{
  url: string;
  listenSent: Promise<void>;
  close: () => void;
}> {
  const target = new URL(base);
  const sent = gate();
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    let silent = false;
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    client.on("data", (d: Buffer) => {
      if (silent) return;
      if (d.includes("LISTEN ")) {
        silent = true;
        sent.open();
        return;
      }
      upstream.write(d);
    });
    client.on("end", () => (silent ? client.destroy() : upstream.end()));
    upstream.on("data", (d) => (silent ? undefined : client.write(d)));
    upstream.on("end", () => (silent ? undefined : client.end()));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = new URL(base);
  url.host = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return {
    url: url.toString(),
    listenSent: sent.opened,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

describe.runIf(pgUrl)("a process on PostgreSQL exits after close()", { concurrent: true }, () => {
  it("when its LISTEN connection's LISTEN is never answered", async () => {
    const proxy = await silentOnListen(pgUrl!);
    const { schema, drop } = testSchema(pgUrl!);
    const t = tempDir("cairn-close-");
    try {
      const script = join(t.dir, "listen-then-close.mjs");
      const src = (path: string) => JSON.stringify(pathToFileURL(join(ROOT, path)).href);
      // The engine opens (its LISTEN connection goes silent), then closes when told to.
      writeFileSync(
        script,
        `import { createEngine, workflow } from ${src("src/index.ts")};
import { postgresStore } from ${src("src/postgres.ts")};
const wf = workflow({ name: "w", version: "1" }, async () => 1);
const engine = createEngine({
  store: postgresStore(${JSON.stringify(proxy.url)}, { schema: ${JSON.stringify(schema)} }),
  workflows: [wf],
  closeGraceMs: 0,
  log: () => {},
});
await engine.getRun("run_none");
console.log("open");
process.stdin.once("data", async () => {
  process.stdin.destroy();
  await engine.close();
  console.log("closed");
});
`,
      );
      const child = spawn(process.execPath, ["--import", "tsx", script], {
        cwd: ROOT,
        stdio: ["pipe", "pipe", "pipe"],
      });
      let out = "";
      child.stdout.on("data", (d) => {
        out += d;
      });
      child.stderr.on("data", (d) => {
        out += d;
      });
      const exited = new Promise<number | null>((resolve) => child.on("close", resolve));
      try {
        await until(() => out.includes("open"), "the engine's open", HANG_MS);
        await within(proxy.listenSent, HANG_MS, "the LISTEN");
        child.stdin.write("close\n");
        const code = await within(exited, HANG_MS, `the process's exit (output: ${out})`);
        expect(out).toContain("closed");
        expect(code).toBe(0);
      } finally {
        child.kill("SIGKILL");
      }
    } finally {
      proxy.close();
      await drop();
      t.cleanup();
    }
  }, 150_000);
});
