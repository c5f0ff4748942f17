// A run's workspace checkpoints and its model stream over HTTP, on SQLite and PostgreSQL:
// the checkpoints per step, the files of a checkpoint, a file's content (text and bytes),
// diffs of a step or between two checkpoints with a file's line diff; one run's URLs never
// reach another run's checkpoint or content; hostile paths and hashes get 400/404, never a
// 500; tokens apply (read-only reads, nothing without one). The model stream as a JSON page
// and as Server-Sent Events, resumed with Last-Event-ID and ended when the run finishes.
// Answers are checked against the OpenAPI document's schemas (with zod).

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { type Ai, createAi } from "../src/ai/index.js";
import { createHttpApp, type HttpServer, serveHttp } from "../src/http/index.js";
import { type Engine, RunNotFoundError, workflow } from "../src/index.js";
import { agentModel, agentWorkflow, PRICES } from "./fixtures/ai-agent.js";
import { memoryDeps } from "./helpers/ai.js";
import { advanceUntil, BACKENDS } from "./helpers/engines.js";
import { call, openStream, sharedHarness } from "./helpers/http.js";
import { until } from "./helpers/sqlite.js";

type Json = Record<string, unknown>;
interface Checkpoint {
  workspace: string;
  step: string;
  checkpoint: string;
  previous?: string;
  changes?: { added: number; modified: number; deleted: number };
  files?: number;
}
interface Change {
  path: string;
  change: string;
  before?: Json;
  after?: Json;
}

const dirs: string[] = [];
function temp(): string {
  const d = mkdtempSync(join(tmpdir(), "cairn-http-ws-"));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const UNICODE_NAME = "ünï cødé 🚀.txt";
const BINARY = Uint8Array.from([0, 1, 2, 255, 254, 0, 10]);

const edit = workflow(
  { name: "ws-edit", version: "1" },
  async (ctx, input: { dir: string; secret?: string }) => {
    const ws = await ctx.workspace("repo", { dir: input.dir });
    await ws.step("edit", () => {
      writeFileSync(join(ws.dir, "a.txt"), "one\nTWO\nthree\n");
      mkdirSync(join(ws.dir, "src"), { recursive: true });
      writeFileSync(join(ws.dir, "src", "new.ts"), "export const x = 1;\n");
      writeFileSync(join(ws.dir, "bin.dat"), BINARY);
      rmSync(join(ws.dir, "old.txt"));
    });
    await ws.step("noop", () => "nothing changed");
    return "edited";
  },
);

function seedDir(secret?: string): string {
  const dir = temp();
  writeFileSync(join(dir, "a.txt"), "one\ntwo\nthree\n");
  writeFileSync(join(dir, "old.txt"), "to be deleted\n");
  writeFileSync(join(dir, UNICODE_NAME), "unicode name\n");
  if (secret) writeFileSync(join(dir, "secret.txt"), secret);
  return dir;
}

const SECRET = "TOP-SECRET-OF-RUN-B";

/** A run whose plain step records a value shaped like a workspace step's, naming a
 *  checkpoint of another run (as untrusted data passed through a step could). */
const mimic = workflow(
  { name: "mimic", version: "1" },
  async (ctx, input: { checkpoint: string }) => {
    await ctx.step("forged", () => ({
      "cairn.workspace": "repo",
      checkpoint: input.checkpoint,
      files: 1,
      bytes: 0,
    }));
    return "done";
  },
);

const review = workflow({ name: "review", version: "1" }, async (ctx) => {
  const answer = await ctx.approval("ship-it", { request: { pr: 7 }, timeout: "2d" });
  return answer;
});

describe.each(BACKENDS)("workspaces and model streams over HTTP on %s", (backend) => {
  const h = sharedHarness(backend);
  let engine: Engine;
  let app: ReturnType<typeof createHttpApp>;
  let doc: { paths: Record<string, Record<string, Json>>; components: { schemas: Json } };
  const api = <T = Json>(method: string, url: string, o: Parameters<typeof call>[3] = {}) =>
    call<T>(app.fetch, method, url, o);
  const A = "ws-run-a";
  const B = "ws-run-b";
  let checkpoints: Checkpoint[];
  let checkpointsB: Checkpoint[];

  /** zod for a response schema of the document (its $refs into the components). */
  function documented(operationId: string, status: number, body: unknown): void {
    const op = Object.values(doc.paths)
      .flatMap((p) => Object.values(p))
      .find((o) => (o as Json).operationId === operationId) as Json | undefined;
    expect(op, operationId).toBeDefined();
    const responses = op!.responses as Record<string, { content?: Record<string, Json> }>;
    const schema = responses[String(status)]?.content?.["application/json"]?.schema;
    expect(schema, `${operationId} ${status} is documented`).toBeDefined();
    const fix = (x: unknown) =>
      JSON.parse(JSON.stringify(x).replaceAll('"#/components/schemas/', '"#/$defs/'));
    const parsed = z
      .fromJSONSchema({ ...fix(schema), $defs: fix(doc.components.schemas) })
      .safeParse(body);
    expect(
      parsed.success,
      `${operationId} ${status}: ${JSON.stringify(parsed.error?.issues)}`,
    ).toBe(true);
  }

  beforeAll(async () => {
    engine = h.engine([edit, review, mimic]);
    const a = await engine.start(edit, { dir: seedDir() }, { id: A });
    const b = await engine.start(edit, { dir: seedDir(SECRET) }, { id: B });
    await advanceUntil(
      h.clock,
      until(
        async () =>
          (await a.info())?.status === "completed" && (await b.info())?.status === "completed",
        "both workspace runs complete",
      ),
      100,
    );
    app = createHttpApp({ engine, clock: h.clock, pollIntervalMs: 20 });
    doc = (await api<typeof doc>("GET", "/api/openapi.json")).body;
  }, 60_000);
  afterAll(() => app?.close());

  it("lists a run's checkpoints per step: the base, then each step with what it started from", async () => {
    const res = await api<{ workspaces: Array<{ name: string; checkpoints: Checkpoint[] }> }>(
      "GET",
      `/api/runs/${A}/workspaces`,
    );
    expect(res.status).toBe(200);
    documented("listWorkspaces", 200, res.body);
    expect(res.body.workspaces.map((w) => w.name)).toEqual(["repo"]);
    checkpoints = res.body.workspaces[0]!.checkpoints;
    expect(checkpoints.map((c) => c.step)).toEqual(["workspace:repo", "edit", "noop"]);
    const [base, edited, noop] = checkpoints as [Checkpoint, Checkpoint, Checkpoint];
    expect(base).toMatchObject({ files: 3 });
    expect(base).not.toHaveProperty("previous");
    expect(edited).toMatchObject({
      previous: base.checkpoint,
      changes: { added: 2, modified: 1, deleted: 1 },
    });
    expect(noop).toMatchObject({
      previous: edited.checkpoint,
      checkpoint: edited.checkpoint,
      changes: { added: 0, modified: 0, deleted: 0 },
    });
    for (const c of checkpoints) expect(c.checkpoint).toMatch(/^[0-9a-f]{64}$/);
    checkpointsB = (
      await api<{ workspaces: Array<{ checkpoints: Checkpoint[] }> }>(
        "GET",
        `/api/runs/${B}/workspaces`,
      )
    ).body.workspaces[0]!.checkpoints;
    expect(checkpointsB[0]!.checkpoint).not.toBe(base.checkpoint);

    const none = await api("GET", "/api/runs/nope/workspaces");
    expect([none.status, (none.body as { error: Json }).error.code]).toEqual([
      404,
      "RUN_NOT_FOUND",
    ]);
    documented("listWorkspaces", 404, none.body);
  });

  it("shows the files of a checkpoint and a file's content, text or bytes", async () => {
    const [base, edited] = checkpoints as [Checkpoint, Checkpoint];
    const tree = await api<{ entries: Json[] }>(
      "GET",
      `/api/runs/${A}/checkpoints/${base.checkpoint}`,
    );
    expect(tree.status).toBe(200);
    documented("readCheckpoint", 200, tree.body);
    expect(tree.body.entries.map((e) => e.path)).toEqual(["a.txt", "old.txt", UNICODE_NAME]);
    const after = await api<{ entries: Json[] }>(
      "GET",
      `/api/runs/${A}/checkpoints/${edited.checkpoint}`,
    );
    expect(after.body.entries.map((e) => [e.path, e.type])).toEqual([
      ["a.txt", "file"],
      ["bin.dat", "file"],
      ["src", "dir"],
      ["src/new.ts", "file"],
      [UNICODE_NAME, "file"],
    ]);

    const file = (cp: string, path: string) =>
      api<{ file: Json }>(
        "GET",
        `/api/runs/${A}/checkpoints/${cp}/file?path=${encodeURIComponent(path)}`,
      );
    const text = await file(edited.checkpoint, "a.txt");
    expect(text.status).toBe(200);
    documented("readWorkspaceFile", 200, text.body);
    expect(text.body.file).toMatchObject({
      path: "a.txt",
      encoding: "utf8",
      content: "one\nTWO\nthree\n",
      size: 14,
    });
    expect((await file(base.checkpoint, "a.txt")).body.file.content).toBe("one\ntwo\nthree\n");
    const bin = await file(edited.checkpoint, "bin.dat");
    expect(bin.body.file).toMatchObject({ encoding: "base64", size: BINARY.length });
    expect([...Buffer.from(bin.body.file.content as string, "base64")]).toEqual([...BINARY]);
    expect((await file(edited.checkpoint, UNICODE_NAME)).body.file.content).toBe("unicode name\n");

    for (const [path, why] of [
      ["old.txt", "deleted by the step"],
      ["src", "a directory"],
      ["nope.txt", "never there"],
    ] as const) {
      const res = await file(edited.checkpoint, path);
      expect([why, res.status, (res.body as unknown as { error: Json }).error.code]).toEqual([
        why,
        404,
        "WORKSPACE_NOT_FOUND",
      ]);
      documented("readWorkspaceFile", 404, res.body);
    }
    const noPath = await api("GET", `/api/runs/${A}/checkpoints/${edited.checkpoint}/file`);
    expect(noPath.status).toBe(400);
  });

  it("never serves another run's checkpoint or content through a run's URLs", async () => {
    const theirs = checkpointsB[0]!.checkpoint;
    for (const url of [
      `/api/runs/${A}/checkpoints/${theirs}`,
      `/api/runs/${A}/checkpoints/${theirs}/file?path=secret.txt`,
      `/api/runs/${A}/workspace-diff?from=${checkpoints[0]!.checkpoint}&to=${theirs}`,
      `/api/runs/${A}/workspace-diff?from=${theirs}&to=${checkpoints[0]!.checkpoint}&path=secret.txt`,
    ]) {
      const res = await api("GET", url);
      expect([url, res.status, (res.body as { error: Json }).error.code]).toEqual([
        url,
        404,
        "WORKSPACE_NOT_FOUND",
      ]);
      expect(JSON.stringify(res.body)).not.toContain(SECRET);
    }
    // A run whose journal merely names the checkpoint (a forged step value) does not hold it.
    const forger = await engine.start(mimic, { checkpoint: theirs }, { id: "mimic-1" });
    await advanceUntil(
      h.clock,
      until(async () => (await forger.info())?.status === "completed", "mimic completes"),
      100,
    );
    const listed = await api<{ workspaces: Array<{ checkpoints: Checkpoint[] }> }>(
      "GET",
      "/api/runs/mimic-1/workspaces",
    );
    expect(listed.body.workspaces[0]?.checkpoints[0]?.checkpoint).toBe(theirs);
    for (const url of [
      `/api/runs/mimic-1/checkpoints/${theirs}`,
      `/api/runs/mimic-1/checkpoints/${theirs}/file?path=secret.txt`,
      `/api/runs/mimic-1/workspace-diff?from=${theirs}&to=${theirs}&path=secret.txt`,
    ]) {
      const res = await api("GET", url);
      expect([url, res.status, (res.body as { error: Json }).error.code]).toEqual([
        url,
        404,
        "WORKSPACE_NOT_FOUND",
      ]);
      expect(JSON.stringify(res.body)).not.toContain(SECRET);
    }
    const page = await (
      await app.fetch(
        new Request(`http://localhost/runs/mimic-1?checkpoint=${theirs}&file=secret.txt`),
      )
    ).text();
    expect(page).not.toContain(SECRET);
    // Its own run serves it.
    const own = await api<{ file: Json }>(
      "GET",
      `/api/runs/${B}/checkpoints/${theirs}/file?path=secret.txt`,
    );
    expect(own.body.file.content).toBe(SECRET);
  });

  it("diffs a step against the checkpoint it started from, or any two checkpoints, with a file's lines", async () => {
    const [base, edited] = checkpoints as [Checkpoint, Checkpoint];
    const byStep = await api<{ from: string; to: string; changes: Change[] }>(
      "GET",
      `/api/runs/${A}/workspace-diff?step=edit`,
    );
    expect(byStep.status).toBe(200);
    documented("diffCheckpoints", 200, byStep.body);
    expect(byStep.body).toMatchObject({
      from: base.checkpoint,
      to: edited.checkpoint,
      step: "edit",
    });
    expect(byStep.body.changes.map((c) => [c.path, c.change])).toEqual([
      ["a.txt", "modified"],
      ["bin.dat", "added"],
      ["old.txt", "deleted"],
      ["src/new.ts", "added"],
    ]);
    const same = await api<{ changes: Change[] }>(
      "GET",
      `/api/runs/${A}/workspace-diff?from=${base.checkpoint}&to=${edited.checkpoint}`,
    );
    expect(same.body.changes).toEqual(byStep.body.changes);
    const back = await api<{ changes: Change[] }>(
      "GET",
      `/api/runs/${A}/workspace-diff?from=${edited.checkpoint}&to=${base.checkpoint}`,
    );
    expect(back.body.changes.map((c) => [c.path, c.change])).toEqual([
      ["a.txt", "modified"],
      ["bin.dat", "deleted"],
      ["old.txt", "added"],
      ["src/new.ts", "deleted"],
    ]);
    expect(
      (await api<{ changes: Change[] }>("GET", `/api/runs/${A}/workspace-diff?step=noop`)).body
        .changes,
    ).toEqual([]);

    const lines = await api<{ file: { hunks: Array<{ lines: string[] }>; binary: boolean } }>(
      "GET",
      `/api/runs/${A}/workspace-diff?step=edit&path=a.txt`,
    );
    documented("diffCheckpoints", 200, lines.body);
    expect(lines.body.file.binary).toBe(false);
    expect(lines.body.file.hunks.flatMap((x) => x.lines)).toEqual([
      " one",
      "-two",
      "+TWO",
      " three",
    ]);
    const added = await api<{ file: { hunks: Array<{ lines: string[] }> } }>(
      "GET",
      `/api/runs/${A}/workspace-diff?step=edit&path=src/new.ts`,
    );
    expect(added.body.file.hunks.flatMap((x) => x.lines)).toEqual(["+export const x = 1;"]);
    const bin = await api<{ file: Json }>(
      "GET",
      `/api/runs/${A}/workspace-diff?step=edit&path=bin.dat`,
    );
    expect(bin.body.file).toMatchObject({ binary: true, hunks: [] });
    const unchanged = await api<{ file: Json }>(
      "GET",
      `/api/runs/${A}/workspace-diff?step=edit&path=${encodeURIComponent(UNICODE_NAME)}`,
    );
    expect(unchanged.body.file).toMatchObject({ binary: false, hunks: [] });

    for (const [q, status] of [
      ["", 400],
      [`step=edit&from=${base.checkpoint}`, 400],
      [`from=${base.checkpoint}`, 400],
      ["step=nope", 404],
      ["step=edit&path=missing.txt", 404],
      ["from=ABC&to=DEF", 400],
    ] as const) {
      const res = await api("GET", `/api/runs/${A}/workspace-diff?${q}`);
      expect([q, res.status]).toEqual([q, status]);
      documented("diffCheckpoints", status, res.body);
    }
  });

  it("answers hostile run ids, checkpoints and paths with 400/404, never a 500, and logs nothing", async () => {
    const logs: string[] = [];
    const quiet = createHttpApp({ engine, clock: h.clock, log: (m) => logs.push(m) });
    const cp = checkpoints[1]!.checkpoint;
    // Written as they travel (percent-encoded): a cut emoji is not encodable otherwise.
    const hostile = [
      "../../etc/passwd",
      "/etc/passwd",
      "a.txt\u0000.png",
      "a".repeat(5_000),
      "<script>alert(1)</script>",
      "src/../a.txt",
      "",
    ]
      .map(encodeURIComponent)
      .concat(["%F0%9F", "%ED%A0%BD", "%E0%A4%A", "%"]);
    try {
      for (const p of hostile) {
        const res = await call(
          quiet.fetch,
          "GET",
          `/api/runs/${A}/checkpoints/${cp}/file?path=${p}`,
        );
        expect([p.slice(0, 20), [400, 404].includes(res.status)]).toEqual([p.slice(0, 20), true]);
        expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      }
      for (const bad of ["0".repeat(63), "g".repeat(64), `${cp}\u0000`, "..", "%00"]) {
        const res = await call(
          quiet.fetch,
          "GET",
          `/api/runs/${A}/checkpoints/${encodeURIComponent(bad)}`,
        );
        // ".." is resolved by the URL itself (no route there): 404; the rest are refused.
        expect([bad, res.status]).toEqual([bad, bad === ".." ? 404 : 400]);
      }
      const ids = ["<script>alert(1)</script>", "a\u0000b", "../..", "x".repeat(300)]
        .map(encodeURIComponent)
        .concat(["%ED%B0%80", "%F0%9F%9A"]);
      for (const id of ids) {
        for (const tail of [
          "/workspaces",
          `/checkpoints/${cp}`,
          `/checkpoints/${cp}/file?path=a.txt`,
          "/workspace-diff?step=edit",
          "/stream",
        ]) {
          const res = await call(quiet.fetch, "GET", `/api/runs/${id}${tail}`);
          expect([id.slice(0, 20), tail, [400, 404].includes(res.status)]).toEqual([
            id.slice(0, 20),
            tail,
            true,
          ]);
          expect(res.headers.get("content-type")).toMatch(/^application\/json/);
        }
      }
      expect(logs).toEqual([]);
    } finally {
      quiet.close();
    }
  });

  it("applies tokens to the new routes: none gets 401, the read-only token reads", async () => {
    const secured = createHttpApp({
      engine,
      clock: h.clock,
      token: "full-token-123456",
      readToken: "read-token-123456",
    });
    try {
      const cp = checkpoints[1]!.checkpoint;
      const urls = [
        `/api/runs/${A}/workspaces`,
        `/api/runs/${A}/checkpoints/${cp}`,
        `/api/runs/${A}/checkpoints/${cp}/file?path=a.txt`,
        `/api/runs/${A}/workspace-diff?step=edit`,
        `/api/runs/${A}/stream`,
      ];
      for (const url of urls) {
        expect([url, (await call(secured.fetch, "GET", url)).status]).toEqual([url, 401]);
        const wrong = await call(secured.fetch, "GET", url, {
          headers: { authorization: "Bearer nope-nope-nope" },
        });
        expect([url, wrong.status]).toEqual([url, 401]);
        const read = await call(secured.fetch, "GET", url, {
          headers: { authorization: "Bearer read-token-123456" },
        });
        expect([url, read.status]).toEqual([url, 200]);
      }
      const foreign = await call(
        secured.fetch,
        "GET",
        `http://evil.example/api/runs/${A}/workspaces`,
        {
          headers: { authorization: "Bearer read-token-123456" },
        },
      );
      expect(foreign.status).toBe(403);
    } finally {
      secured.close();
    }
  });

  it("draws the Workspace panel: checkpoints, files, a file, a step's diff; never another run's", async () => {
    const page = async (q: string) => {
      const res = await app.fetch(new Request(`http://localhost/runs/${A}${q}`));
      return { status: res.status, text: await res.text() };
    };
    const [base, edited] = checkpoints as [Checkpoint, Checkpoint];
    const plain = await page("");
    expect(plain.status).toBe(200);
    expect(plain.text).toContain('id="workspace"');
    expect(plain.text).toContain(`?diff=edit#workspace`);
    expect(plain.text).toContain(`?checkpoint=${base.checkpoint}#workspace`);

    const diff = await page("?diff=edit");
    expect(diff.text).toContain('<span class="del">-two</span>');
    expect(diff.text).toContain('<span class="ins">+TWO</span>');
    expect(diff.text).toContain("Not text: no line diff.");

    const file = await page(`?checkpoint=${edited.checkpoint}&file=a.txt`);
    expect(file.text).toContain('<pre class="ws-file">one\nTWO\nthree\n</pre>');
    expect(file.text).toContain(`file=src%2Fnew.ts`);

    const theirs = checkpointsB[0]!.checkpoint;
    const other = await page(`?checkpoint=${theirs}&file=secret.txt`);
    expect(other.status).toBe(200);
    expect(other.text).not.toContain(SECRET);
    expect(other.text).toContain("has no workspace checkpoint");

    const hostile = await page(
      `?checkpoint=${encodeURIComponent("<script>alert(1)</script>")}&diff=${encodeURIComponent("<img src=x onerror=alert(1)>")}`,
    );
    expect(hostile.status).toBe(200);
    expect(hostile.text).not.toContain("<script>alert");
    expect(hostile.text).not.toContain("<img src=x");
  });

  it("says in the runs list which approval a run waits for, and until when", async () => {
    const r = await engine.start(review, undefined, { id: "review-7" });
    await advanceUntil(
      h.clock,
      until(async () => (await r.info())?.status === "waiting", "review waits"),
      100,
    );
    const page = await (await app.fetch(new Request("http://localhost/?q=review-7"))).text();
    expect(page).toMatch(
      /<span class="tag human">approval<\/span> waits for <code>ship-it<\/code> <span class="muted">· until <time/,
    );
  });

  it("shows a stream chunk it cannot decode as a placeholder, never its text", async () => {
    // A run not yet finished: the store refuses chunks of a finished one (A).
    const C = "ws-run-undecodable";
    const store = h.store();
    await store.open({ clock: h.clock });
    try {
      await store.createRun({
        id: C,
        workflow: "served-by-nobody",
        version: "1",
        input: "[1]",
        budgetLimit: {},
      });
      await store.appendStream({
        runId: C,
        chunks: [`{"not cairn/ai": "${SECRET}"`, `{"call": 7, "text": "${SECRET}"}`],
      });
    } finally {
      await store.close();
    }
    const res = await api<{ chunks: Json[] }>("GET", `/api/runs/${C}/stream`);
    expect(res.status).toBe(200);
    documented("getRunStream", 200, res.body);
    expect(res.body.chunks.map((c) => c.part)).toEqual([
      { type: "undecodable" },
      { type: "undecodable" },
    ]);
    expect(JSON.stringify(res.body)).not.toContain(SECRET);
    const page = await (await app.fetch(new Request(`http://localhost/runs/${C}`))).text();
    expect(page).toContain("a part that cannot be decoded");
    expect(page).not.toContain(SECRET);
  });

  describe("model stream", () => {
    let server: HttpServer;
    let agent: Engine;
    let release!: () => void;
    let runId: string;
    let kit: Ai | undefined;

    beforeAll(async () => {
      // A kit of this file's own, closed after all its tests (helpers/ai.ts closes its kits
      // after each test, which would end the stream's writes while the run goes on).
      kit = createAi({ store: h.store(), clock: h.clock, prices: PRICES });
      const deps = memoryDeps();
      const gate = new Promise<void>((r) => {
        release = r;
      });
      // The third call (the answer) holds its stream open after two words.
      const model = agentModel({
        deps,
        streamPart: async (part, i, n) => {
          if (n === 3 && part.type === "text-delta" && i > 3) await gate;
        },
      });
      const wf = agentWorkflow(kit, model, deps, { stream: true, name: "streamer" });
      agent = h.engine([wf]);
      runId = (await agent.start(wf, { topic: "streams" }, { id: "streaming-run" })).id;
      server = await serveHttp({ engine: agent, port: 0, pollIntervalMs: 20, log: () => {} });
    }, 30_000);
    afterAll(async () => {
      release?.();
      await server?.close();
      await kit?.close();
    });

    const textOf = (messages: Array<{ event: string; data: unknown }>) =>
      messages
        .filter((m) => m.event === "chunk")
        .map((m) => m.data as { part: { type: string; delta?: string } })
        .filter((c) => c.part.type === "text-delta")
        .map((c) => c.part.delta)
        .join("");

    it("streams a live run's model output, resumes from Last-Event-ID, and ends with the run", async () => {
      const url = `${server.url}/api/live/runs/${runId}/stream`;
      const first = await openStream(url);
      expect(first.status).toBe(200);
      await first.next(() => textOf(first.messages).endsWith("Done with "), "the first words");
      const cut = first.messages.filter((m) => m.event === "chunk").at(-1)!;
      expect(Number(cut.id)).toBe((cut.data as { offset: number }).offset);
      first.close();
      expect((await agent.getRun(runId))?.status).toBe("running");
      // The run page draws what was streamed so far and follows on from the next offset.
      const runPage = await (await fetch(`${server.url}/runs/${runId}`)).text();
      expect(runPage).toContain('id="model-stream"');
      expect(runPage).toContain(`data-stream="/api/live/runs/${runId}/stream"`);
      expect(runPage).toMatch(/<pre class="mtext" data-role="text">Done with <\/pre>/);
      const from = Number(/data-from="(\d+)"/.exec(runPage)?.[1]);
      expect(from).toBe(Number(cut.id) + 1);

      const page = await call<{ chunks: Json[]; next: number }>(
        (r) => fetch(r),
        "GET",
        `${server.url}/api/runs/${runId}/stream`,
      );
      expect(page.status).toBe(200);
      documented("getRunStream", 200, page.body);
      expect(page.body.chunks.map((c) => c.offset)).toEqual(page.body.chunks.map((_, i) => i));
      expect(page.body.next).toBe(Number(cut.id) + 1);

      // The reconnect goes to another server (its own client engine on the same store): the
      // offsets are the store's, so it resumes exactly there too.
      const client = h.engine([], { worker: false });
      const second = await serveHttp({
        engine: client,
        port: 0,
        pollIntervalMs: 20,
        log: () => {},
      });
      const again = await openStream(`${second.url}/api/live/runs/${runId}/stream`, {
        "last-event-id": cut.id!,
      });
      release();
      const end = await again.next((m) => m.event === "end", "the end of the stream");
      expect(end.data).toMatchObject({ status: "completed" });
      const out = (await agent.getRun(runId))!.output as { text: string };
      const resumed = again.messages.filter((m) => m.event === "chunk");
      expect(Number(resumed[0]!.id)).toBe(Number(cut.id) + 1);
      expect(textOf(first.messages) + textOf(again.messages)).toContain(out.text);
      // Offsets are contiguous across the two connections: nothing missed, nothing twice.
      const offsets = [...first.messages, ...resumed]
        .filter((m) => m.event === "chunk")
        .map((m) => Number(m.id));
      expect(offsets).toEqual(offsets.map((_, i) => i));
      again.close();
      await second.close();

      // A finished run's stream: everything from `from`, then end, then it closes.
      const late = await openStream(`${url}?from=2`);
      await late.next((m) => m.event === "end", "end of a finished run's stream");
      const lateOffsets = late.messages.filter((m) => m.event === "chunk").map((m) => Number(m.id));
      expect(lateOffsets[0]).toBe(2);
      expect(lateOffsets.at(-1)).toBe(offsets.at(-1));
      late.close();
    });

    it("ends the stream of a run deleted while it is read, instead of polling forever", async () => {
      // The run is found when the stream opens, and gone (retention) when it is read.
      const gone: Engine = {
        ...agent,
        readStream: () => Promise.reject(new RunNotFoundError(`Run "${runId}" does not exist`)),
      };
      const logs: string[] = [];
      const other = await serveHttp({
        engine: gone,
        port: 0,
        pollIntervalMs: 20,
        log: (m) => logs.push(m),
      });
      try {
        const s = await openStream(`${other.url}/api/live/runs/${runId}/stream`);
        const end = await s.next((m) => m.event === "end", "the end");
        expect(end.data).toMatchObject({ status: "deleted" });
        expect(s.messages.map((m) => m.event)).toEqual(["end"]);
        s.close();
        expect(logs).toEqual([]);
      } finally {
        await other.close();
      }
    });

    it("refuses a malformed Last-Event-ID and an unknown run", async () => {
      const bad = await call(
        (r) => fetch(r),
        "GET",
        `${server.url}/api/live/runs/${runId}/stream`,
        { headers: { "last-event-id": "abc" } },
      );
      expect(bad.status).toBe(400);
      const none = await call((r) => fetch(r), "GET", `${server.url}/api/live/runs/nope/stream`);
      expect(none.status).toBe(404);
      const nonePage = await call((r) => fetch(r), "GET", `${server.url}/api/runs/nope/stream`);
      expect(nonePage.status).toBe(404);
      const op = doc.paths["/api/live/runs/{id}/stream"]?.get as
        | { responses: Record<string, { content?: Json }> }
        | undefined;
      expect(op?.responses["200"]?.content).toHaveProperty(["text/event-stream"]);
    });
  });
});
