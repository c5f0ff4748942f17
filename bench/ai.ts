// The cairn/ai section: what making AI SDK calls durable costs, on a temp-dir SQLite file
// (WAL, synchronous=FULL). The raw floor is the same SDK code calling the AI SDK's mock
// model and the same tools directly, in the same process. Figures:
// - a model call through generateText: durable (a recorded step), and durable with the
//   shared limiter (one more store transaction per call);
// - a tool call: durable (a recorded step keyed by its tool call id) against execute();
// - a 200-turn conversation: bytes recorded per turn, against the bytes of the turn's own
//   content (the user's message and the model's answer).

import { statSync } from "node:fs";
import { join } from "node:path";
import { generateText, type ModelMessage, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import Database from "better-sqlite3";
import { z } from "zod";
import type { AnyWorkflow, WorkflowContext } from "../src/index.js";
import { cairn, cairnAi } from "./cairn.js";
import { fmt, median, now, type Section, type SectionReport, tempDir } from "./lib.js";

const { createEngine, realClock, sqliteStore, workflow } = cairn;
const { createAi } = cairnAi;

const ROUNDS = 5;
const CALLS = 100;
const TURNS = 200;

const USAGE = {
  inputTokens: { total: 1000, noCache: 1000, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 200, text: 200, reasoning: 0 },
};

/** The mock answers with a fixed-size text derived from the prompt's length. */
function mockModel(answerChars: number) {
  return new MockLanguageModelV4({
    doGenerate: async (o) => ({
      content: [{ type: "text", text: answerOf(o.prompt.length, answerChars) }],
      finishReason: { unified: "stop", raw: "stop" },
      usage: USAGE,
      warnings: [],
      response: { id: `resp_${o.prompt.length}`, modelId: "mock-model-id", timestamp: new Date(0) },
    }),
  });
}

function answerOf(n: number, chars: number): string {
  return `Answer ${n}: ${"lorem ipsum dolor sit amet ".repeat(Math.ceil(chars / 27))}`.slice(
    0,
    chars,
  );
}

function userMessage(turn: number): string {
  return `Turn ${turn}: ${"please look at the next part of the report and summarise it. ".repeat(2)}`;
}

const echo = tool({
  inputSchema: z.object({ n: z.number() }),
  execute: async ({ n }) => ({ n, ok: true }),
});

/** Stamps of the current measurement (performance.now() around a workflow's loop). */
const stamps: number[] = [];

export function aiSection(): Section {
  const title = "cairn/ai (AI SDK mock model, SQLite temp-dir file, synchronous=FULL)";
  return { title, run: () => runSection(title) };
}

async function runSection(title: string): Promise<SectionReport> {
  const tmp = tempDir();
  const report: SectionReport = { title, rows: [], notes: [] };
  try {
    await calls(tmp.dir, report);
    await conversation(tmp.dir, report);
  } finally {
    tmp.cleanup();
  }
  return report;
}

/** Runs `wf` once to completion on a fresh file; returns the ms its loop took. */
async function timedRun(wf: AnyWorkflow, store: ReturnType<typeof sqliteStore>): Promise<number> {
  const engine = createEngine({ store, workflows: [wf], pollIntervalMs: 10 });
  try {
    stamps.length = 0;
    const run = await engine.start(wf, null);
    await run.result();
    if (stamps.length !== 2) throw new Error(`bench: ${wf.id}: expected two stamps`);
    return stamps[1]! - stamps[0]!;
  } finally {
    await engine.close();
  }
}

/** A workflow timing `CALLS` sequential calls of `body`. */
function timedLoop(name: string, body: (ctx: WorkflowContext, i: number) => Promise<unknown>) {
  return workflow({ name, version: "1" }, async (ctx) => {
    stamps.push(now());
    for (let i = 0; i < CALLS; i++) await body(ctx, i);
    stamps.push(now());
    return null;
  });
}

/** Model calls, tool calls and a plain step, measured in interleaved rounds (the disk's
 *  fsync latency drifts; each round measures every variant once). */
async function calls(dir: string, report: SectionReport): Promise<void> {
  const mock = mockModel(300);
  const plain = createAi();
  const opts = (i: number) => ({ toolCallId: `call_${i}`, messages: [], context: {} });
  const m = { raw: [] as number[], durable: [] as number[], limited: [] as number[] };
  const t = { raw: [] as number[], durable: [] as number[] };
  const steps: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    let t0 = now();
    for (let i = 0; i < CALLS; i++) await generateText({ model: mock, prompt: `q${i}` });
    m.raw.push((now() - t0) / CALLS);
    t0 = now();
    for (let i = 0; i < CALLS; i++) await echo.execute({ n: i }, opts(i));
    t.raw.push((now() - t0) / CALLS);

    const file = (what: string) => sqliteStore(join(dir, `${what}-${round}.db`));
    const durable = timedLoop("bench-ai-model", (ctx, i) =>
      generateText({ model: plain.model(ctx, mock), prompt: `q${i}` }),
    );
    m.durable.push((await timedRun(durable, file("model"))) / CALLS);

    const limitedStore = join(dir, `limited-${round}.db`);
    const shared = createAi({
      store: sqliteStore(limitedStore),
      clock: realClock,
      limits: { "*": { requestsPerMinute: 1_000_000 } },
    });
    const limited = timedLoop("bench-ai-limited", (ctx, i) =>
      generateText({ model: shared.model(ctx, mock), prompt: `q${i}` }),
    );
    m.limited.push((await timedRun(limited, sqliteStore(limitedStore))) / CALLS);
    await shared.close();

    const tools = timedLoop("bench-ai-tool", async (ctx, i) => {
      await plain.tools(ctx, { echo }).echo.execute({ n: i }, opts(i));
    });
    t.durable.push((await timedRun(tools, file("tool"))) / CALLS);

    const step = timedLoop("bench-ai-step", (ctx, i) => ctx.step("s", () => ({ i })));
    steps.push((await timedRun(step, file("step"))) / CALLS);
  }
  const [mr, md, ml, tr, td, s] = [m.raw, m.durable, m.limited, t.raw, t.durable, steps].map(
    median,
  ) as [number, number, number, number, number, number];
  report.rows.push(
    {
      name: "model call via generateText, durable",
      unit: "ms/call",
      cairn: md,
      raw: mr,
      better: "lower",
    },
    {
      name: "model call, durable + shared limiter",
      unit: "ms/call",
      cairn: ml,
      raw: mr,
      better: "lower",
    },
    { name: "tool call, durable", unit: "ms/call", cairn: td, raw: tr, better: "lower" },
  );
  report.notes.push(
    `overhead per call (${CALLS} sequential calls, median of ${ROUNDS} interleaved rounds): model ${fmt(md - mr)} ms, model with the shared limiter ${fmt(ml - mr)} ms (one more store transaction), tool ${fmt(td - tr)} ms; a plain ctx.step returning a small value costs ${fmt(s)} ms here (its commit's fsync): a durable call is one recorded step`,
  );
}

async function conversation(dir: string, report: SectionReport): Promise<void> {
  const mock = mockModel(300);
  const ai = createAi();
  let promptBytes = 0;
  // A chat: each user message arrives as an event, the model answers with the whole
  // conversation so far as its prompt.
  const wf = workflow({ name: "bench-ai-chat", version: "1" }, async (ctx) => {
    const messages: ModelMessage[] = [];
    promptBytes = 0;
    stamps.push(now());
    for (let t = 0; t < TURNS; t++) {
      const said = await ctx.waitForEvent<string>("user");
      if (said.timedOut) break;
      messages.push({ role: "user", content: said.payload });
      promptBytes += Buffer.byteLength(JSON.stringify(messages));
      const r = await generateText({ model: ai.model(ctx, mock), messages });
      messages.push(...r.response.messages);
    }
    stamps.push(now());
    return messages.length;
  });
  const path = join(dir, "chat.db");
  const engine = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 10 });
  let stepBytes = 0;
  let eventBytes = 0;
  let contentBytes = 0;
  let records = 0;
  let firstTurn = 0;
  let lastTurn = 0;
  let ms = 0;
  try {
    stamps.length = 0;
    const run = await engine.start(wf, null);
    for (let t = 0; t < TURNS; t++) {
      await engine.sendEvent(run.id, "user", userMessage(t));
      contentBytes += Buffer.byteLength(userMessage(t)) + Buffer.byteLength(answerOf(0, 300));
    }
    await run.result();
    ms = stamps[1]! - stamps[0]!;
    const db = new Database(path, { readonly: true });
    const size = (rows: unknown[], numericColumns: number) => {
      let bytes = 0;
      for (const row of rows as Array<Record<string, unknown>>) {
        for (const v of Object.values(row)) {
          if (typeof v === "string") bytes += Buffer.byteLength(v);
        }
        bytes += numericColumns * 8;
      }
      return bytes;
    };
    // Text columns as stored, plus 8 bytes for each numeric column of the row.
    const steps = db
      .prepare("SELECT key, name, kind, outcome, result, error, spend FROM steps WHERE run_id = ?")
      .all(run.id);
    records = steps.length;
    stepBytes = size(steps, 9);
    // The records of the first turn and of the last: a turn costs the same at any length.
    const turn = (t: number) => {
      const suffix = t === 1 ? "" : `#${t}`;
      const keys = new Set([`user${suffix}`, `model:mock-model-id${suffix}`]);
      return size(
        (steps as Array<{ key: string }>).filter((r) => keys.has(r.key)),
        9,
      );
    };
    firstTurn = turn(1);
    lastTurn = turn(TURNS);
    eventBytes = size(
      db.prepare("SELECT name, payload, consumed_by FROM events WHERE run_id = ?").all(run.id),
      3,
    );
    db.close();
  } finally {
    await engine.close();
  }
  const recorded = stepBytes + eventBytes;
  const fileBytes = statSync(path).size;
  report.rows.push({
    name: `${TURNS}-turn conversation: bytes stored per turn`,
    unit: "B/turn",
    cairn: recorded / TURNS,
    raw: contentBytes / TURNS,
    better: "lower",
  });
  report.notes.push(
    `${TURNS}-turn chat (a ${Buffer.byteLength(userMessage(0))}-byte user message as an event, a 300-character answer): ${fmt(recorded / 1024)} KiB in all, ${fmt(recorded / TURNS)} B/turn (${records} records: ${fmt(stepBytes / TURNS)} B/turn, turn 1 ${fmt(firstTurn)} B, turn ${TURNS} ${fmt(lastTurn)} B; events: ${fmt(eventBytes / TURNS)} B/turn); the raw floor is the turns' own text. A record that also kept its prompt would store ${fmt(promptBytes / 1024 / 1024)} MiB (${fmt(promptBytes / TURNS)} B/turn on average, growing with the turn). SQLite file after the run: ${fmt(fileBytes / 1024)} KiB. ${fmt(ms / TURNS)} ms/turn.`,
  );
}
