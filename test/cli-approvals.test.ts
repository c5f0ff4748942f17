// The approval commands as users run them (a child process via tsx) against a store an
// in-process worker executes: `runs --waiting-approval`, `show` with the request,
// `approve` / `reject` (who, comment; a second answer fails with exit 1), usage errors
// (exit 2), and `approval-link` (links signed with $CAIRN_APPROVAL_KEYS that the worker's
// engine, holding the same key, accepts once). On SQLite, and approve on PostgreSQL.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type ApprovalResult,
  createEngine,
  type Engine,
  type RunStatus,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";

const KEY = "k1=an-approval-signing-secret-of-32-chars!";

const review = workflow({ name: "cli-review", version: "1" }, async (ctx, input: { pr: number }) =>
  ctx.approval("merge", {
    request: { summary: `Merge PR ${input.pr}`, diff: "- old\n+ new" },
    timeout: "2d",
  }),
);

describe("cairn approve / reject / approval-link (SQLite)", () => {
  const dir = tempDir("cairn-cli-approvals-");
  const env = { CAIRN_STORE: `sqlite:${join(dir.dir, "cairn.db")}` };
  let engine: Engine;

  async function waitFor(id: string, status: RunStatus): Promise<void> {
    await until(async () => (await engine.getRun(id))?.status === status, `${id} ${status}`);
  }

  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(join(dir.dir, "cairn.db")),
      workflows: [review],
      pollIntervalMs: 20,
      approvalKeys: [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }],
    });
    for (const id of ["pr-1", "pr-2", "pr-3"]) {
      await engine.start(review, { pr: Number(id.slice(3)) }, { id });
    }
    for (const id of ["pr-1", "pr-2", "pr-3"]) await waitFor(id, "waiting");
  });

  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("runs --waiting-approval lists the runs and what they wait for; show prints the request", async () => {
    const listed = await cairn(["runs", "--waiting-approval"], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/^ID\s+WORKFLOW\s+APPROVAL\s+DEADLINE\s+CREATED$/m);
    expect(listed.stdout).toMatch(/pr-1\s+cli-review@1\s+merge\s+\d{4}-/);
    const shown = await cairn(["show", "pr-1"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/Approvals \(1\):\n\s+merge\s+pending/);
    expect(shown.stdout).toMatch(/request\n\s+summary\s+Merge PR 1\n\s+diff\s+- old\n\s+\+ new\n/);
    expect(shown.stdout).toMatch(/deadline\s+\d{4}-.*\(then: reject\)/);
    expect(shown.stdout).toContain("cairn approve pr-1 merge");
  });

  it("approve records who and why, the run continues; answering again fails and changes nothing", async () => {
    const ok = await cairn(
      ["approve", "pr-1", "merge", "--comment", "ship it", "--by", "alice"],
      env,
    );
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/^Approved "merge" of run "pr-1" as alice at \d{4}-/);
    const out = (await engine.handle("pr-1").result()) as ApprovalResult;
    expect(out).toMatchObject({ approved: true, by: "alice", comment: "ship it", via: "cli" });

    expectFailure(
      await cairn(["reject", "pr-1", "merge", "--by", "mallory"], env),
      1,
      /already approved by alice .*nothing was changed/,
    );
    const shown = await cairn(["show", "pr-1", "--json"], env);
    const parsed = JSON.parse(shown.stdout) as { approvals: Array<Record<string, unknown>> };
    expect(parsed.approvals[0]).toMatchObject({
      status: "approved",
      answeredBy: "alice",
      comment: "ship it",
    });
  });

  it("reject (the approver from $CAIRN_APPROVER); unknown approvals and bad usage fail", async () => {
    const no = await cairn(["reject", "pr-2", "merge", "--comment", "needs tests", "--json"], {
      ...env,
      CAIRN_APPROVER: "bob",
    });
    expect(no.code, no.stderr).toBe(0);
    expect(JSON.parse(no.stdout)).toMatchObject({ status: "rejected", answeredBy: "bob" });
    await expect(engine.handle("pr-2").result()).resolves.toMatchObject({ approved: false });
    expectFailure(await cairn(["approve", "pr-3", "deploy"], env), 1, /has no approval "deploy"/);
    expectFailure(await cairn(["approve", "pr-3"], env), 2, /missing <name>/);
    expectFailure(
      await cairn(["approve", "pr-3", "merge", "--by", ""], env),
      2,
      /The approver \(by\) must be 1-200 characters/,
    );
    expectFailure(
      await cairn(["approve", "pr-3", "merge", "--answer", "{nope"], env),
      2,
      /--answer is not valid JSON/,
    );
  });

  it("approval-link prints links the server's engine accepts once; without a key it fails", async () => {
    expectFailure(
      await cairn(["approval-link", "pr-3", "merge", "--base-url", "http://x"], env),
      1,
      /No approval key: set CAIRN_APPROVAL_KEYS/,
    );
    // Malformed keys are a usage error here as for "cairn ui", which reads the same variable.
    expectFailure(
      await cairn(["approval-link", "pr-3", "merge", "--base-url", "http://x"], {
        ...env,
        CAIRN_APPROVAL_KEYS: "k1",
      }),
      2,
      /CAIRN_APPROVAL_KEYS: approval keys are written "id=secret/,
    );
    const res = await cairn(
      [
        "approval-link",
        "pr-3",
        "merge",
        "--base-url",
        "https://ops.example.com/cairn/",
        "--by",
        "carol",
        "--json",
      ],
      { ...env, CAIRN_APPROVAL_KEYS: KEY },
    );
    expect(res.code, res.stderr).toBe(0);
    const links = JSON.parse(res.stdout) as { approve: string; reject: string };
    expect(links.approve).toMatch(/^https:\/\/ops\.example\.com\/cairn\/approvals\/ca1\.k1\./);
    const token = links.reject.split("/approvals/")[1]!;
    const view = await engine.answerApprovalLink(token);
    expect(view).toMatchObject({ status: "rejected", answeredBy: "carol", via: "link" });
    await expect(engine.answerApprovalLink(token)).rejects.toThrow(/already used/);
    await expect(engine.handle("pr-3").result()).resolves.toMatchObject({ decision: "rejected" });
  });
});

const pgUrl = await postgresTestUrl();
describe.skipIf(!pgUrl)("cairn approve (PostgreSQL)", () => {
  it("approves a run waiting on PostgreSQL", async () => {
    const { schema, drop } = testSchema(pgUrl!);
    const engine = createEngine({
      store: postgresStore(pgUrl!, { schema }),
      workflows: [review],
      pollIntervalMs: 20,
    });
    try {
      await engine.start(review, { pr: 7 }, { id: "pg-7" });
      await until(async () => (await engine.getRun("pg-7"))?.status === "waiting", "pg-7 waits");
      const env = { CAIRN_STORE: pgUrl!, CAIRN_PG_SCHEMA: schema };
      const ok = await cairn(["approve", "pg-7", "merge", "--by", "erin"], env);
      expect(ok.code, ok.stderr).toBe(0);
      await expect(engine.handle("pg-7").result()).resolves.toMatchObject({ by: "erin" });
    } finally {
      await engine.close();
      await drop();
    }
  });
});
