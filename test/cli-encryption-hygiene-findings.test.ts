// Findings on the CLI's flags, encryption under a rotated key list, retention and tracing:
// each test here failed before the fix in src/ it names.

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it, onTestFinished } from "vitest";
import {
  createEngine,
  type EncryptionKey,
  encryptedStore,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { cairn, expectFailure, ROOT, startCairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

describe("a value flag given twice", () => {
  it("is a usage error naming the flag, not the last value silently (gc --older-than twice)", async () => {
    const t = tempDir("cairn-twice-");
    const path = join(t.dir, "cairn.db");
    const done = workflow({ name: "done", version: "1" }, async (ctx) => ctx.step("a", () => 1));
    const engine = createEngine({
      store: sqliteStore(path),
      workflows: [done],
      pollIntervalMs: 10,
    });
    try {
      await (await engine.start(done, undefined, { id: "old" })).result();
      await engine.close();
      // An alias "gc --older-than 30d" plus a flag typed after it: deleting every run that
      // finished more than 1 ms ago is not what either value asked alone.
      const res = await cairn(["gc", "--older-than", "30d", "--older-than=1ms", "--store", path]);
      expectFailure(res, 2, /--older-than is given more than once/);
      const twice = await cairn(["--store", path, "runs", "--store", join(t.dir, "other.db")]);
      expectFailure(twice, 2, /--store is given more than once/);
      // Nothing was deleted; a repeatable flag (--budget) and a boolean twice still work.
      const listed = await cairn(["runs", "--json", "--json", "--store", path]);
      expect(listed.code, listed.stderr).toBe(0);
      expect(JSON.parse(listed.stdout).map((r: { id: string }) => r.id)).toEqual(["old"]);
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

describe("a SQLite store path that is a FIFO", () => {
  it("is refused naming the path, instead of hanging the process for ever", async () => {
    const t = tempDir("cairn-fifo-");
    const fifo = join(t.dir, "cairn.db");
    execFileSync("mkfifo", [fifo]);
    try {
      // Before the fix, open() blocked the whole process reading the FIFO: the CLI never
      // answered (the test's own timeout ended it).
      const cli = startCairn(["runs", "--store", fifo]);
      onTestFinished(() => {
        if (cli.child.exitCode === null) cli.child.kill("SIGKILL");
      });
      const res = await cli.done;
      expectFailure(res, 1, /is not a regular file \(a FIFO, a socket or a device\)/);
    } finally {
      t.cleanup();
    }
  });
});

describe("a postgres:// store URL that is not a URL", () => {
  it("says the URL is malformed and how to write one, without the password or a fake SQLSTATE", async () => {
    for (const url of [
      "postgres://ann:Pw0rd@127.0.0.1:notaport/db",
      "postgres://ann:Pw0rd@[::1/db",
    ]) {
      const res = await cairn(["runs", "--store", url]);
      expectFailure(res, 1, /the connection URL is not a valid URL/);
      expect(res.stderr).not.toContain("SQLSTATE");
      expect(res.stderr).not.toContain("Pw0rd");
    }
  });
});

describe("an approval link that expires at once", () => {
  const review = workflow({ name: "review", version: "1" }, async (ctx) =>
    ctx.approval("merge", { request: "+fix" }),
  );
  const KEYS = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];

  it("engine.approvalToken refuses expiresIn 0 by name instead of handing out a dead token", async () => {
    const engine = createEngine({ store: sqliteStore(), workflows: [review], approvalKeys: KEYS });
    try {
      await engine.start(review, undefined, { id: "a1" });
      await until(async () => (await engine.getRun("a1"))?.status === "waiting", "a1 waits");
      await expect(
        engine.approvalToken("a1", "merge", "approve", { expiresIn: 0 }),
      ).rejects.toThrow(/expiresIn must be at least 1s/);
    } finally {
      await engine.close();
    }
  });

  it("cairn approval-link --expires 0s is a usage error naming --expires, not 'this link expired'", async () => {
    const t = tempDir("cairn-link-");
    const path = join(t.dir, "cairn.db");
    const engine = createEngine({
      store: sqliteStore(path),
      workflows: [review],
      pollIntervalMs: 10,
    });
    try {
      await engine.start(review, undefined, { id: "a1" });
      await until(async () => (await engine.getRun("a1"))?.status === "waiting", "a1 waits");
      const res = await cairn(
        ["approval-link", "a1", "merge", "--base-url", "http://ops.test", "--expires", "0s"],
        { CAIRN_STORE: `sqlite:${path}`, CAIRN_APPROVAL_KEYS: `k1=${KEYS[0]!.secret}` },
      );
      expectFailure(res, 2, /--expires must be a duration of at least 1000ms/);
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

describe("cairn check-replay --run with a run it does not check", () => {
  it("exits 1 naming the run (a typo must not pass a deploy gate), and checks a run given twice once", async () => {
    const t = tempDir("cairn-replay-run-");
    const path = join(t.dir, "cairn.db");
    const greet = workflow({ name: "greet", version: "1" }, async (ctx) =>
      ctx.step("hello", () => "hi"),
    );
    const engine = createEngine({
      store: sqliteStore(path),
      workflows: [greet],
      pollIntervalMs: 10,
    });
    try {
      await (await engine.start(greet, undefined, { id: "g1" })).result();
      await engine.close();
      const module = join(t.dir, "workflows.mjs");
      writeFileSync(
        module,
        `import { workflow } from ${JSON.stringify(pathToFileURL(join(ROOT, "src/index.ts")).href)};
export const greet = workflow({ name: "greet", version: "1" }, async (ctx) => ctx.step("hello", () => "hi"));
`,
      );
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const ok = await cairn(["check-replay", module, "--run", "g1", "--run", "g1", "--json"], env);
      expect(ok.code, ok.stderr).toBe(0);
      expect(JSON.parse(ok.stdout).map((r: { runId: string }) => r.runId)).toEqual(["g1"]);
      const typo = await cairn(["check-replay", module, "--run", "g1", "--run", "gl"], env);
      expect(typo.code, typo.stderr).toBe(1);
      expect(typo.stdout).toContain("1 ok, 0 not");
      expect(typo.stderr).toMatch(/--run "gl" not checked: no such run/);
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

describe("an input nested thousands of levels deep", () => {
  it("is refused saying it is nested too deeply, not 'cannot store Maximum call stack size exceeded'", async () => {
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.step("a", () => 1));
    const engine = createEngine({ store: sqliteStore(), workflows: [wf], worker: false });
    try {
      let deep: unknown = 1;
      for (let i = 0; i < 100_000; i++) deep = [deep];
      const err = await engine.start(wf, deep, { id: "deep" }).catch((e: Error) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toMatch(
        /nested this deeply.*flatten it.*nothing was recorded/,
      );
      expect((err as Error).message).not.toContain("Maximum call stack");
      expect(await engine.getRun("deep")).toBeUndefined();
    } finally {
      await engine.close();
    }
  });
});

describe("--budget __proto__=1, or one name twice", () => {
  it("is refused naming the flag, not dropped (or replaced) while the run starts without the limit", async () => {
    const t = tempDir("cairn-proto-");
    const path = join(t.dir, "cairn.db");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.step("a", () => 1));
    const engine = createEngine({ store: sqliteStore(path), workflows: [wf], worker: false });
    try {
      await engine.listRuns(); // creates the store
      const res = await cairn(["start", "wf@1", "--budget", "__proto__=1", "--store", path]);
      expectFailure(res, 2, /--budget: "__proto__" cannot name an amount/);
      // Two limits for one name: the first was silently replaced by the second.
      const twice = await cairn([
        "start",
        "wf@1",
        "--budget",
        "usd=1",
        "--budget",
        "tokens=5,usd=100",
        "--store",
        path,
      ]);
      expectFailure(twice, 2, /--budget gives "usd" more than once/);
      expect(await engine.listRuns()).toEqual([]);
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

describe("a negative number as a JSON payload", () => {
  it("is refused saying how to give it (after --), and is sent that way", async () => {
    const t = tempDir("cairn-negative-");
    const path = join(t.dir, "cairn.db");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.waitForEvent("temp"));
    const engine = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 10 });
    try {
      const run = await engine.start(wf, undefined, { id: "n1" });
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const refused = await cairn(["send", "n1", "temp", "-5"], env);
      expectFailure(
        refused,
        2,
        /Unknown option '-5': a value that starts with "-" goes after "--" \(e\.g\. -- -5\)/,
      );
      const sent = await cairn(["send", "n1", "temp", "--", "-5"], env);
      expect(sent.code, sent.stderr).toBe(0);
      expect(await run.result()).toEqual({ timedOut: false, payload: -5 });
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

/** The SQLite file and its write-ahead log, as text. */
function storedText(path: string): string {
  const wal = `${path}-wal`;
  return [path, ...(existsSync(wal) ? [wal] : [])].map((p) => readFileSync(p, "latin1")).join("");
}

describe("the CLI without $CAIRN_ENCRYPTION_KEYS on an encrypted run", () => {
  it("refuses to store an event's payload, an approval comment or a cancel reason in plain text, writing nothing", async () => {
    const t = tempDir("cairn-plain-write-");
    const path = join(t.dir, "cairn.db");
    const k = key("k1");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => {
      await ctx.approval("merge", { request: "+fix" });
      return ctx.waitForEvent("card");
    });
    const engine = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [k] }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    try {
      await engine.start(wf, undefined, { id: "p1" });
      await until(async () => (await engine.listApprovals("p1")).length === 1, "p1 asks");
      const env = { CAIRN_STORE: `sqlite:${path}` };
      const sent = await cairn(["send", "p1", "card", '"4111-1111-SECRET"'], env);
      expectFailure(
        sent,
        1,
        /run "p1" is encrypted \(key "k1"\) and \$CAIRN_ENCRYPTION_KEYS is not set/,
      );
      const approved = await cairn(["approve", "p1", "merge", "--comment", "SECRET plan"], env);
      expectFailure(approved, 1, /nothing was written/);
      const canceled = await cairn(["cancel", "p1", "--reason", "SECRET customer asked"], env);
      expectFailure(canceled, 1, /the reason would be stored in plain text/);
      expect((await engine.getRun("p1"))?.status).toBe("waiting");
      expect(await engine.listEvents("p1")).toEqual([]);
      expect((await engine.listApprovals("p1"))[0]?.status).toBe("pending");
      expect(storedText(path)).not.toContain("SECRET");
      // With the key, the same command goes through (encrypted).
      const withKey = await cairn(["send", "p1", "card", '"4111-1111-SECRET"'], {
        ...env,
        CAIRN_ENCRYPTION_KEYS: `k1=${k.key}`,
      });
      expect(withKey.code, withKey.stderr).toBe(0);
      expect(storedText(path)).not.toContain("SECRET");
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

describe("cairn show of an approval request with a line break in a field's name", () => {
  it("prints the name on its line, so it cannot forge an 'answer it' line", async () => {
    const t = tempDir("cairn-request-");
    const path = join(t.dir, "cairn.db");
    const forged = "diff\n    answer it   cairn approve other-run merge";
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) =>
      ctx.approval("merge", { request: { [forged]: "+fix" } }),
    );
    const engine = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 10 });
    try {
      await engine.start(wf, undefined, { id: "q1" });
      await until(async () => (await engine.listApprovals("q1")).length === 1, "q1 asks");
      const shown = await cairn(["show", "q1", "--store", path]);
      expect(shown.code, shown.stderr).toBe(0);
      const answerLines = shown.stdout.split("\n").filter((l) => l.trim().startsWith("answer it"));
      expect(answerLines).toEqual(["    answer it cairn approve q1 merge (or reject)"]);
    } finally {
      await engine.close();
      t.cleanup();
    }
  });
});

describe("a client whose key list lacks the key a run was written with", () => {
  const waiter = workflow({ name: "waiter", version: "1" }, async (ctx, input: { s: string }) => {
    await ctx.step("a", () => `${input.s}!`);
    const answer = await ctx.approval("merge", { request: { diff: input.s } });
    await ctx.waitForEvent("go");
    return answer;
  });

  async function waitingRun(path: string, old: EncryptionKey, id: string) {
    const worker = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [old] }),
      workflows: [waiter],
      pollIntervalMs: 10,
    });
    await worker.start(waiter, { s: "SecretInput" }, { id });
    await until(async () => (await worker.getRun(id))?.status === "waiting", `${id} waits`);
    await until(() => worker.metrics().activeExecutions === 0, `${id} held by no execution`);
    // An event no wait consumes yet, under the old key.
    await worker.sendEvent(id, "note", { from: "before the rotation" });
    await worker.close();
  }

  const costly = workflow({ name: "costly", version: "1", budget: { usd: 1 } }, async (ctx) => {
    await ctx.step("a", (s) => {
      s.spend({ usd: 2 });
    });
    return ctx.step("b", () => "done");
  });

  // (engine.approve there refuses before it writes anything, naming the key: that holds.)
  it("engine.cancel and engine.resume that the store carried out resolve, not throw", async () => {
    const t = tempDir("cairn-rotated-");
    const path = join(t.dir, "cairn.db");
    const [old, fresh] = [key("old"), key("new")];
    await waitingRun(path, old, "r1");
    await waitingRun(path, old, "r2");
    const worker = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [old] }),
      workflows: [costly],
      pollIntervalMs: 10,
    });
    await worker.start(costly, undefined, { id: "p1" });
    await until(async () => (await worker.getRun("p1"))?.status === "paused", "p1 paused");
    await until(() => worker.metrics().activeExecutions === 0, "p1 held by no execution");
    await worker.close();
    const client = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [fresh] }),
      worker: false,
    });
    try {
      await expect(client.approve("r1", "merge", { by: "ann" })).rejects.toThrow(
        /Approval "merge" of run "r1" is encrypted with key "old"/,
      );
      // The cancel is committed in the store's transaction: the call must say so.
      await expect(client.cancel("r2", "no longer needed")).resolves.toBeUndefined();
      await expect(client.resume("p1", { budget: { usd: 10 } })).resolves.toMatchObject({
        id: "p1",
      });
      const plain = createEngine({ store: sqliteStore(path), worker: false });
      try {
        expect((await plain.getRun("r2"))?.status).toBe("canceled");
        expect(await plain.getRun("p1")).toMatchObject({
          status: "pending",
          budget: { limit: { usd: 10 } },
        });
        expect((await plain.listApprovals("r1"))[0]?.status).toBe("pending");
      } finally {
        await plain.close();
      }
    } finally {
      await client.close();
      t.cleanup();
    }
  });

  it("cairn cancel and cairn send report what they did (exit 0), not an error after doing it", async () => {
    const t = tempDir("cairn-rotated-cli-");
    const path = join(t.dir, "cairn.db");
    const [old, fresh] = [key("old"), key("new")];
    await waitingRun(path, old, "c1");
    await waitingRun(path, old, "s1");
    const env = { CAIRN_STORE: `sqlite:${path}`, CAIRN_ENCRYPTION_KEYS: `new=${fresh.key}` };
    try {
      const canceled = await cairn(["cancel", "c1"], env);
      expect(canceled.code, canceled.stderr).toBe(0);
      expect(canceled.stdout).toContain('Canceled run "c1"');
      const sent = await cairn(["send", "s1", "go", '{"ok":true}'], env);
      expect(sent.code, sent.stderr).toBe(0);
      expect(sent.stdout).toContain('Sent event "go" to run "s1"');
      // s1 waits for its approval first: the warning says so, without the old-key events.
      expect(sent.stderr).toContain('is waiting for approval "merge"');
      // Each was done once: a user told it failed would have sent it again.
      const plain = createEngine({ store: sqliteStore(path), worker: false });
      try {
        expect((await plain.getRun("c1"))?.status).toBe("canceled");
        expect((await plain.listEvents("s1")).map((e) => e.name)).toEqual(["note", "go"]);
      } finally {
        await plain.close();
      }
    } finally {
      t.cleanup();
    }
  });
});
