// Findings of a review of cairn/ai (tool-call ids reused each turn, URLs in prompts, big attachments, the limiter): each test failed before its mend in src/ai.

import { createHash } from "node:crypto";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { createAi, idempotencyKeyOf } from "../src/ai/index.js";
import { legacyDigest, readRequest } from "../src/ai/request-text.js";
import type { CallOptions } from "../src/ai/sdk-types.js";
import { decode, encode } from "../src/codec/codec.js";
import { createEngine, NonDeterminismError, sqliteStore, workflow } from "../src/index.js";
import { crashSweep, createSideEffectCounter, createVirtualClock } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import {
  answeringModel,
  type MockAnswer,
  type MockPrompt,
  textAnswer,
  toolCallsAnswer,
  toolResultsOf,
  turnOf,
} from "./helpers/ai-mock.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const db = tempDbPath();
afterAll(() => db.cleanup());

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("tool call ids reused on every turn", () => {
  for (const stream of [false, true]) {
    it(`${stream ? "streamText" : "generateText"}: a multi-turn agent with parallel calls, ids call_0..call_2 every turn and an awaiting onToolExecutionStart replays exactly after a crash at every boundary`, async () => {
      const fx = createSideEffectCounter();
      const answer = (prompt: MockPrompt): MockAnswer => {
        const turn = turnOf(prompt);
        if (turn < 3) {
          return toolCallsAnswer(
            "work",
            [0, 1, 2].map((i) => ({ id: `call_${i}`, input: { n: turn * 10 + i } })),
          );
        }
        return textAnswer(toolResultsOf(prompt).join(" "));
      };
      const model = answeringModel(answer);
      const work = tool({
        inputSchema: z.object({ n: z.number() }),
        execute: async ({ n }, options) => {
          // Keyed: a body cut by the crash runs again under the same key (a plain step).
          fx.record(`work:${n}`, idempotencyKeyOf(options));
          // Later calls finish first: the order of outcomes is not the order of calls.
          await pause(((7 - (n % 10)) * 3) % 7);
          return n * n;
        },
      });
      const ai = createAi({ store: sqliteStore(db.path) });
      const wf = workflow({ name: "reused-ids", version: "1" }, async (ctx) => {
        const options = {
          model: ai.model(ctx, model),
          tools: ai.tools(ctx, { work }),
          prompt: "go",
          stopWhen: stepCountIs(6),
          // A log written somewhere before each tool runs (a timer stands for its I/O).
          onToolExecutionStart: async (e: { toolCall: { toolCallId: string } }) => {
            await pause(e.toolCall.toolCallId === "call_0" ? 4 : 1);
          },
        };
        if (!stream) return (await generateText(options)).text;
        const r = streamText(options);
        return await r.text;
      });
      try {
        const sweep = await crashSweep({
          workflows: [wf],
          workflow: wf,
          input: null,
          sideEffects: fx,
        });
        expect(sweep.baseline.error).toBeUndefined();
        expect(sweep.baseline.status).toBe("completed");
        expect(sweep.baseline.output).toBe(
          "call_0=0 call_1=1 call_2=4 call_0=100 call_1=121 call_2=144 call_0=400 call_1=441 call_2=484",
        );
        expect(sweep.failures).toEqual([]);
        expect(sweep.boundaries.filter((b) => !b.crashed)).toEqual([]);
        expect(sweep.boundaries.length).toBeGreaterThan(20);
      } finally {
        await ai.close();
      }
    });
  }
});

describe("a tool call id reused after a call the SDK did not execute", () => {
  const harness = useHarness("sqlite");

  // Turn 1's call_0 had input the tool's schema refuses: the SDK answered it with a tool
  // error and never executed it. That answer stayed "not executed" for good, so turn 3's
  // call_0 could not tell which answer it came from, and was left to the core's rule: with
  // an onToolExecutionStart that awaits I/O, NonDeterminismError.
  it("a later turn's call with that id still keeps its place", async () => {
    const h = harness();
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        const turn = o.prompt.filter((m) => m.role === "assistant").length;
        const call = (i: number, n: unknown) => ({
          type: "tool-call" as const,
          toolCallId: `call_${i}`,
          toolName: "work",
          input: JSON.stringify({ n }),
        });
        return turn < 3
          ? {
              content: [call(0, turn === 0 ? "bad" : turn * 10), call(1, turn * 10 + 1)],
              finishReason: { unified: "tool-calls", raw: undefined },
              usage: USAGE,
              warnings: [],
            }
          : {
              content: [{ type: "text", text: toolResultsOf(o.prompt).join(" ") }],
              finishReason: { unified: "stop", raw: undefined },
              usage: USAGE,
              warnings: [],
            };
      },
    });
    let executed = 0;
    const work = tool({
      inputSchema: z.object({ n: z.number() }),
      execute: async ({ n }) => {
        executed++;
        return n + 1000;
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "refused-input", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { work }),
        prompt: "go",
        stopWhen: stepCountIs(6),
        onToolExecutionStart: async () => {
          await pause(2);
        },
      });
      await ctx.waitForEvent("go");
      return r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const info = await advanceUntil(
      h.clock,
      (async () => {
        for (;;) {
          const i = await run.info();
          if (i?.status === "waiting" || i?.status === "failed") return i;
          await pause(5);
        }
      })(),
      100,
      300,
    );
    expect(info.error).toBeUndefined();
    expect(info.status).toBe("waiting");
    await engine.sendEvent(run.id, "go", null);
    expect(await advanceUntil(h.clock, run.result(), 100, 300)).toBe(
      "call_1=1001 call_0=1010 call_1=1011 call_0=1020 call_1=1021",
    );
    expect(executed).toBe(5);
  });
});

describe.each(BACKENDS)("URL parts of a prompt (%s)", (backend) => {
  const harness = useHarness(backend);
  afterEach(() => {
    vi.unstubAllGlobals();
  });

  // The SDK downloads every URL part the model does not take as a URL before it calls the
  // model: a replayed call, answered from its record, downloaded again (network on replay),
  // and a file whose content changed since made the request digest differ: the replay
  // failed with NonDeterminismError.
  it("a replayed call downloads nothing, and a file changed since does not fail the replay", async () => {
    const h = harness();
    let downloads = 0;
    let version = 1;
    vi.stubGlobal("fetch", async (url: string | URL) => {
      downloads++;
      expect(String(url)).toBe("https://files.example/report.pdf");
      return new Response(new TextEncoder().encode(`report v${version}`), {
        headers: { "content-type": "application/pdf" },
      });
    });
    const seen: string[] = [];
    const model = new MockLanguageModelV4({
      // Takes images on its CDN as URLs, nothing else: a PDF must be sent as its bytes.
      supportedUrls: { "image/*": [/^https:\/\/cdn\.example\//] },
      doGenerate: async (o) => {
        for (const m of o.prompt) {
          if (m.role !== "user") continue;
          for (const p of m.content) {
            if (p.type === "file") {
              seen.push(
                `${p.mediaType}:${p.data.type === "data" ? new TextDecoder().decode(p.data.data as Uint8Array) : p.data.type}`,
              );
            }
          }
        }
        return {
          content: [{ type: "text", text: "summary" }],
          finishReason: { unified: "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = kitFor(h, { prices: { "*": { input: 0, output: 0 } } });
    const wf = workflow({ name: "url-parts", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "Summarize" },
              {
                type: "file",
                data: new URL("https://files.example/report.pdf"),
                mediaType: "application/pdf",
              },
              {
                type: "file",
                data: new URL("https://cdn.example/cat.png"),
                mediaType: "image/png",
              },
            ],
          },
        ],
      });
      await ctx.waitForEvent("go");
      return r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await advanceUntil(
      h.clock,
      (async () => {
        for (;;) {
          const info = await run.info();
          if (info?.status === "waiting" || info?.status === "failed") return info.status;
          await new Promise((r) => setTimeout(r, 5));
        }
      })(),
      100,
      300,
    );
    expect(seen).toEqual(["application/pdf:report v1", "image/png:url"]);
    expect(downloads).toBe(1);
    version = 2; // the file changed while the run waited
    await engine.sendEvent(run.id, "go", null);
    const out = await advanceUntil(
      h.clock,
      run.result().then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      ),
      100,
      300,
    );
    expect(out).toEqual({ value: "summary" });
    expect(downloads).toBe(1);
    expect(seen).toEqual(["application/pdf:report v1", "image/png:url"]);
  });
});

describe("URL parts at every crash boundary", () => {
  afterEach(() => {
    vi.unstubAllGlobals();
  });

  it("files in a tool result's content too, as the SDK converts them, at every crash boundary", async () => {
    let downloads = 0;
    vi.stubGlobal("fetch", async () => {
      downloads++;
      return new Response(new Uint8Array([137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13]), {
        headers: { "content-type": "application/octet-stream" },
      });
    });
    const seen: string[] = [];
    const model = new MockLanguageModelV4({
      supportedUrls: {},
      doGenerate: async (o) => {
        const turn = o.prompt.filter((m) => m.role === "assistant").length;
        const parts: string[] = [];
        for (const m of o.prompt) {
          if (m.role === "user")
            for (const p of m.content)
              if (p.type === "file") parts.push(`${p.mediaType}:${p.data.type}`);
          if (m.role === "tool")
            for (const p of m.content)
              if (p.type === "tool-result" && p.output.type === "content")
                for (const v of p.output.value)
                  if (v.type === "file") parts.push(`tool ${v.mediaType}:${v.data.type}`);
        }
        seen.push(parts.join(","));
        return {
          content:
            turn === 0
              ? [{ type: "tool-call", toolCallId: "call_0", toolName: "shot", input: "{}" }]
              : [{ type: "text", text: parts.join(",") }],
          finishReason: { unified: turn === 0 ? "tool-calls" : "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const shot = tool({
      inputSchema: z.object({}),
      execute: async () => "shot",
      toModelOutput: () =>
        ({
          type: "content",
          value: [
            {
              type: "file",
              data: { type: "url", url: new URL("https://img.example/shot.png") },
              mediaType: "image",
            },
          ],
        }) as never,
    });
    const ai = createAi();
    const wf = workflow({ name: "url-sweep", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { shot }),
        stopWhen: stepCountIs(3),
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "look" },
              { type: "file", data: new URL("https://img.example/a.png"), mediaType: "image" },
            ],
          },
        ],
      });
      return r.text;
    });
    const sweep = await crashSweep({ workflows: [wf], workflow: wf, input: null });
    // The model takes no URL: both files reach it as bytes, typed by their content (PNG).
    expect(sweep.baseline.output).toBe("image/png:data,tool image/png:data");
    expect(sweep.failures).toEqual([]);
    expect(seen[0]).toBe("image/png:data");
    expect(downloads).toBeGreaterThan(0);
  });
});

describe("a file's bytes in a prompt", () => {
  // A Uint8Array is, for JSON.stringify, an object of one key per byte: some 14 characters
  // and a few microseconds a byte. Each model call stringified its whole prompt for the
  // request digest, again for the digests of its prefixes, and again for the limiter's
  // estimate: some 10 s of blocked event loop per call with a 5 MB file (heartbeats, every
  // other run of the worker), on replays too. Now the bytes are hashed as bytes, once; a
  // record written before (without `u`) is checked against the digest it holds.
  it("is never stringified as JSON, and a record written before still replays", async () => {
    const db = tempDbPath();
    const clock = createVirtualClock();
    const bytes = new Uint8Array(1024 * 1024).map((_, i) => (i * 7) % 256);
    let asked: Parameters<MockLanguageModelV4["doGenerate"]>[0] | undefined;
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        asked ??= o;
        calls++;
        return {
          content: [{ type: "text", text: "read" }],
          finishReason: { unified: "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = createAi({
      store: sqliteStore(db.path),
      clock,
      limits: { "*": { tokensPerMinute: 10_000_000 } },
    });
    const wf = workflow(
      { name: "big-file", version: "1" },
      async (ctx, input: { file: number }) => {
        const r = await generateText({
          model: ai.model(ctx, model),
          messages: [
            {
              role: "user",
              content: [
                { type: "text", text: "Read this" },
                { type: "file", data: input.file === 1 ? bytes : bytes.slice(1), mediaType: "x/y" },
              ],
            },
          ],
        });
        await ctx.waitForEvent("go");
        return r.text;
      },
    );
    const engine = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf],
      clock,
      pollIntervalMs: 10,
    });
    const raw = new Database(db.path);
    const stringify = JSON.stringify;
    try {
      let longest = 0;
      const spy = vi.spyOn(JSON, "stringify").mockImplementation(function (this: JSON, ...args) {
        const text = stringify.apply(JSON, args as Parameters<typeof stringify>);
        if (typeof text === "string") longest = Math.max(longest, text.length);
        return text;
      } as typeof stringify);
      const runs = [];
      try {
        for (const file of [1, 2]) {
          const run = await engine.start(wf, { file });
          await until(async () => (await run.info())?.status === "waiting", "the run waits");
          runs.push(run);
        }
      } finally {
        spy.mockRestore();
      }
      // The bytes as JSON are over 10 million characters.
      expect(longest).toBeLessThan(bytes.length);
      expect(calls).toBe(2);
      // Both records rewritten as cairn wrote them before: the digest of the JSON text of
      // the FIRST run's request, no `u`. The first run's replay matches it; the second's
      // (another file) does not.
      const o = asked!;
      const older = createHash("sha256")
        .update(
          stringify([
            o.prompt,
            o.tools?.map((t) => ("name" in t ? t.name : "")),
            o.toolChoice,
            o.responseFormat,
          ]),
        )
        .digest("base64url")
        .slice(0, 16);
      for (const run of runs) {
        const row = raw
          .prepare("SELECT result FROM steps WHERE run_id = ? AND key = ?")
          .get(run.id, "model:mock-model-id") as { result: string };
        const rec = decode<Record<string, unknown>>(row.result);
        expect(rec.u).toBe(1);
        expect(rec.d).not.toBe(older);
        rec.d = older;
        delete rec.u;
        raw
          .prepare("UPDATE steps SET result = ? WHERE run_id = ? AND key = ?")
          .run(encode(rec), run.id, "model:mock-model-id");
        await engine.sendEvent(run.id, "go", null);
      }
      expect(await runs[0]!.result()).toBe("read");
      await expect(runs[1]!.result()).rejects.toThrow(NonDeterminismError);
      expect(calls).toBe(2);
    } finally {
      raw.close();
      await engine.close();
      await ai.close();
      db.cleanup();
    }
  });
});

describe("the request's text, read once", () => {
  // A prompt without bytes keeps the digest cairn recorded before (JSON.stringify's text);
  // with bytes, legacyDigest gives the one records written before hold.
  it("keeps JSON.stringify's digest and prefixes, and gives the older digest of bytes", () => {
    const legacy = (text: string) =>
      createHash("sha256").update(text).digest("base64url").slice(0, 16);
    const floats = new Float32Array([1.5, Number.NaN, -0, Number.POSITIVE_INFINITY, 1e-7]);
    const text = { type: "text", text: 'quote " and \u0000 and \ud83d\ude00' };
    const files = [
      { type: "file", mediaType: "image/png", data: { type: "data", data: new Uint8Array() } },
      { type: "file", mediaType: "x/y", data: { type: "data", data: new Uint8Array([0, 255, 7]) } },
      { type: "file", mediaType: "x/z", data: { type: "data", data: floats }, extra: undefined },
    ];
    const promptOf = (content: unknown[]) =>
      [
        { role: "system", content: "be brief" },
        { role: "user", content },
        undefined,
      ] as unknown as CallOptions["prompt"];
    const optionsOf = (prompt: CallOptions["prompt"]) =>
      ({
        prompt,
        tools: [{ type: "function", name: "work", inputSchema: {} }],
        toolChoice: { type: "auto" },
      }) as unknown as CallOptions;
    const jsonDigest = (o: CallOptions) =>
      legacy(JSON.stringify([o.prompt, ["work"], o.toolChoice, o.responseFormat]));
    const jsonPrefixes = (prompt: CallOptions["prompt"]) => {
      const h = createHash("sha256");
      const out = [h.copy().digest("base64url")];
      for (const m of prompt) {
        h.update(JSON.stringify(m) ?? "null");
        h.update("\n");
        out.push(h.copy().digest("base64url"));
      }
      return out;
    };
    // Without bytes: the text and its digests as before.
    const plain = optionsOf(promptOf([text]));
    const r0 = readRequest(plain, true);
    expect(r0.digest).toBe(jsonDigest(plain));
    expect(r0.prefixes).toEqual(jsonPrefixes(plain.prompt));
    expect(r0.promptChars).toBe(JSON.stringify(plain.prompt).length);
    expect(r0.hasBytes).toBe(false);
    // With bytes: legacyDigest is the older digest; the new one depends on every byte.
    const withBytes = optionsOf(promptOf([text, ...files]));
    const r1 = readRequest(withBytes, true);
    expect(r1.hasBytes).toBe(true);
    expect(legacyDigest(withBytes)).toBe(jsonDigest(withBytes));
    expect(r1.digest).not.toBe(jsonDigest(withBytes));
    const changed = optionsOf(
      promptOf([
        text,
        files[0],
        { ...files[1], data: { type: "data", data: new Uint8Array([0, 255, 8]) } },
        files[2],
      ]),
    );
    expect(readRequest(changed, true).digest).not.toBe(r1.digest);
    expect(readRequest(changed, true).prefixes?.[1]).toBe(r1.prefixes?.[1]);
    expect(readRequest(changed, true).prefixes?.[2]).not.toBe(r1.prefixes?.[2]);
    // The limiter's estimate counts a file's bytes as base64, as a provider is sent them.
    const asSent = JSON.stringify(withBytes.prompt, (_k, v: unknown) =>
      ArrayBuffer.isView(v)
        ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64")
        : v,
    );
    expect(r1.promptChars).toBe(asSent.length);
    // No JSON text: no digest, no prefixes, as before.
    const cyclic: Record<string, unknown> = { role: "user" };
    cyclic.content = [cyclic];
    expect(readRequest({ prompt: [cyclic] } as unknown as CallOptions, true)).toEqual({
      digest: "",
      prefixes: undefined,
      promptChars: 0,
      hasBytes: false,
    });
  });
});

describe("a call its caller aborts while the limiter holds it", () => {
  const harness = useHarness("sqlite");

  // The limiter's in-process wait listened only to the step's signal: a generateText whose
  // abortSignal fired meanwhile waited for the window (here: a minute) before failing, and
  // a wait too long for the process was recorded as "throttled" and slept durably, the
  // abort forgotten: the next execution made the call as if nobody had given up on it.
  it("fails at once with the abort's error, as a call aborted at the provider does", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls++;
        return {
          content: [{ type: "text", text: "ok" }],
          finishReason: { unified: "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = kitFor(h, {
      limits: { "*": { requestsPerMinute: 1 } },
      maxInProcessWaitMs: 120_000,
    });
    const wf = workflow({ name: "aborted-in-limiter", version: "1" }, async (ctx) => {
      const first = await generateText({ model: ai.model(ctx, model), prompt: "one" });
      const abort = new AbortController();
      setTimeout(() => abort.abort(), 20);
      try {
        await generateText({
          model: ai.model(ctx, model),
          prompt: "two",
          abortSignal: abort.signal,
        });
        return `${first.text} then a second answer`;
      } catch (err) {
        return `${first.text} then ${(err as Error).name}`;
      }
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    // The virtual clock stands still: only the abort can end the second call's wait.
    const info = await until(
      async () => {
        const i = await run.info();
        return i?.status === "completed" || i?.status === "failed" ? i : undefined;
      },
      "the run ended without the limiter's window opening",
      10_000,
    );
    expect(info.status).toBe("completed");
    expect(info.output).toBe("ok then AbortError");
    expect(calls).toBe(1);
    const steps = await engine.getSteps(run.id);
    const second = steps.find((st) => st.key === "model:mock-model-id#2");
    expect(second?.error?.name).toBe("AbortError");
    expect(steps.some((st) => st.key.endsWith(":throttled"))).toBe(false);
  });
});

describe("a tool that throws something other than an Error", () => {
  const harness = useHarness("sqlite");

  // cairn records a thrown value that is not an Error as String() makes it: a tool that
  // threw { code, reason } (as some HTTP clients do) reached the model as
  // "Error: [object Object]", where the SDK alone shows the model the JSON.
  it("reaches the model as the SDK shows it, on the first execution and on replay", async () => {
    const h = harness();
    const seen: string[] = [];
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        const turn = o.prompt.filter((m) => m.role === "assistant").length;
        for (const m of o.prompt) {
          if (m.role !== "tool") continue;
          for (const p of m.content) {
            if (p.type === "tool-result" && p.output.type === "error-text")
              seen.push(p.output.value);
          }
        }
        return {
          content:
            turn === 0
              ? [
                  { type: "tool-call", toolCallId: "c1", toolName: "quota", input: "{}" },
                  { type: "tool-call", toolCallId: "c2", toolName: "nothing", input: "{}" },
                ]
              : [{ type: "text", text: "done" }],
          finishReason: { unified: turn === 0 ? "tool-calls" : "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const quota = tool({
      inputSchema: z.object({}),
      execute: async (): Promise<string> => {
        throw { code: 7, reason: "quota exceeded" };
      },
    });
    const nothing = tool({
      inputSchema: z.object({}),
      execute: async (): Promise<string> => {
        throw undefined;
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "non-error-throw", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { quota, nothing }, { retry: { maxAttempts: 1 } }),
        prompt: "go",
        stopWhen: stepCountIs(3),
      });
      await ctx.waitForEvent("go");
      return r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await until(async () => (await run.info())?.status === "waiting", "the run waits");
    expect(seen).toEqual(['Error: {"code":7,"reason":"quota exceeded"}', "Error: unknown error"]);
    await engine.sendEvent(run.id, "go", null);
    expect(await run.result()).toBe("done");
    expect(seen).toHaveLength(2); // the replay called no model
  });
});

describe("conversations of one run whose provider numbers tool call ids alike", () => {
  const harness = useHarness("sqlite");

  // Two generateText calls one after the other, each answered with a call_0: the second's
  // tool call reuses the first's name ("tool:work:call_0"), with nothing in the data tying
  // it to the first; with an onToolExecutionStart that awaits I/O the core refuses it, and
  // its advice (give each call its own name) had no way to be followed: ai.tools named
  // every call "tool:...". A tools `name` gives each conversation its own names.
  it("run one after another with a tools name each", async () => {
    const h = harness();
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        const turn = o.prompt.filter((m) => m.role === "assistant").length;
        return {
          content:
            turn === 0
              ? [{ type: "tool-call", toolCallId: "call_0", toolName: "work", input: "{}" }]
              : [{ type: "text", text: toolResultsOf(o.prompt).join(" ") }],
          finishReason: { unified: turn === 0 ? "tool-calls" : "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    let n = 0;
    const work = tool({ inputSchema: z.object({}), execute: async () => ++n });
    const ai = kitFor(h);
    const wf = workflow({ name: "two-conversations", version: "1" }, async (ctx) => {
      const ask = async (prompt: string, name: string) => {
        const r = await generateText({
          model: ai.model(ctx, model),
          tools: ai.tools(ctx, { work }, { name }),
          prompt,
          stopWhen: stepCountIs(3),
          onToolExecutionStart: async () => {
            await pause(2);
          },
        });
        return r.text;
      };
      const a = await ask("first", "first-tools");
      const b = await ask("second", "second-tools");
      await ctx.waitForEvent("go");
      return `${a} / ${b}`;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const info = await until(async () => {
      const i = await run.info();
      return i?.status === "waiting" || i?.status === "failed" ? i : undefined;
    }, "the run waits");
    expect(info.error).toBeUndefined();
    const keys = (await engine.getSteps(run.id)).map((st) => st.key);
    expect(keys).toContain("first-tools:work:call_0");
    expect(keys).toContain("second-tools:work:call_0");
    await engine.sendEvent(run.id, "go", null);
    expect(await run.result()).toBe("call_0=1 / call_0=2");
    expect(n).toBe(2);
    // A name no step may have is refused by name.
    const bad = workflow({ name: "bad-tools-name", version: "1" }, async (ctx) => {
      ai.tools(ctx, { work }, { name: "a#b" });
    });
    const e2 = h.engine([bad]);
    const refused = await e2.start(bad, null);
    await expect(refused.result()).rejects.toThrow(
      /ai.tools\(\) in run .*name "a#b" cannot name its calls/,
    );
  });
});

describe("the limiter's estimate of a call with a file", () => {
  const harness = useHarness("sqlite");

  // The estimate was the prompt's JSON length / 4, and a file's bytes are, as JSON, some
  // 14 characters a byte: a 256 KB file made a call "take" 900,000 tokens, so two such
  // calls could not share a window of a million tokens a minute; the second was throttled
  // for the minute (and every other run of the fleet with it) until the first settled.
  it("counts the bytes as base64: two calls with a 256 KB file share a 1M-token window", async () => {
    const h = harness();
    const model = new MockLanguageModelV4({
      doGenerate: async () => ({
        content: [{ type: "text", text: "seen" }],
        finishReason: { unified: "stop", raw: undefined },
        usage: USAGE,
        warnings: [],
      }),
    });
    const ai = kitFor(h, {
      limits: { "*": { tokensPerMinute: 1_000_000 } },
      maxInProcessWaitMs: 0,
    });
    const file = new Uint8Array(256 * 1024).map((_, i) => i % 256);
    const wf = workflow({ name: "two-files", version: "1" }, async (ctx) => {
      const ask = (text: string) =>
        generateText({
          model: ai.model(ctx, model, { name: `reader-${text}` }),
          messages: [
            {
              role: "user",
              content: [
                { type: "text", text },
                { type: "file", data: file, mediaType: "application/pdf" },
              ],
            },
          ],
        });
      const [a, b] = await Promise.all([ask("a"), ask("b")]);
      return `${a.text} ${b.text}`;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const ended = await until(async () => {
      const i = await run.info();
      if (i?.status === "completed" || i?.status === "failed") return i.status;
      const steps = await engine.getSteps(run.id);
      return steps.some((st) => st.key.endsWith(":throttled")) ? "throttled" : undefined;
    }, "the run completed or a call was throttled");
    expect(ended).toBe("completed");
    expect(await run.result()).toBe("seen seen");
  });
});
