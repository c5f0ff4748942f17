// Findings on cairn/ai (Buffers, failed downloads, side-by-side conversations) and on stored error text (the escape): each test failed before its mend.

import { createHash } from "node:crypto";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createAi, idempotencyKeyOf } from "../src/ai/index.js";
import { readRequest } from "../src/ai/request-text.js";
import type { CallOptions } from "../src/ai/sdk-types.js";
import { decode, encode } from "../src/codec/codec.js";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { checkReplay, crashSweep, createSideEffectCounter } from "../src/testing/index.js";
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
import { advanceUntil, useHarness } from "./helpers/engines.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const db = tempDbPath();
afterAll(() => db.cleanup());

describe("an error recorded before error text was escaped (e502e93)", () => {
  // The previous version stored an error's message as it was: "cairn:enc:0:hello" is such a
  // message, not an escaped one (escaped text is always "cairn:enc:0:" + "cairn:enc:"...).
  // It was read back as "hello": a replay that caught the error returned other text.
  it("whose message begins cairn:enc:0: replays as itself on a plain store", async () => {
    const path = `${db.path}-escape`;
    const wf = workflow({ name: "old-error", version: "1" }, async (ctx) => {
      try {
        await ctx.step(
          "fails",
          async () => {
            throw new Error("cairn:enc:0:hello");
          },
          { retry: { maxAttempts: 1 } },
        );
        return "no error";
      } catch (err) {
        return (err as Error).message;
      }
    });
    const engine = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 10 });
    let runId: string;
    try {
      const h = await engine.start(wf, null);
      runId = h.id;
      expect(await h.result()).toBe("cairn:enc:0:hello");
    } finally {
      await engine.close();
    }
    const raw = new Database(path);
    try {
      const row = raw
        .prepare("SELECT error FROM steps WHERE run_id = ? AND key = ?")
        .get(runId, "fails") as { error: string };
      const [name, message, code, stack] = JSON.parse(row.error) as unknown[];
      expect(message).toBe("cairn:enc:0:cairn:enc:0:hello"); // stored escaped now
      // As the previous version wrote it.
      const older = JSON.stringify([name, "cairn:enc:0:hello", code, stack]);
      raw
        .prepare("UPDATE steps SET error = ? WHERE run_id = ? AND key = ?")
        .run(older, runId, "fails");
    } finally {
      raw.close();
    }
    const [res] = await checkReplay({ store: sqliteStore(path), workflows: [wf] });
    expect(res?.detail).toBe("replayed to completion");
    expect(res?.verdict).toBe("ok");
  });
});

describe("a URL part whose download fails inside the call's step", () => {
  const harness = useHarness("sqlite");

  // The call was admitted by the limiter (its estimate taken from the tokens-per-minute
  // window) before its files were downloaded; a download that failed left the estimate
  // in the window though no request reached the provider. Two failed downloads of a call
  // with maxOutputTokens 3,000 held 6,000 of a 10,000-token window for a minute: the
  // run's next call (and every other run of the fleet on that model) was throttled.
  it("gives the window back the estimate of an attempt that never reached the provider", async () => {
    const h = harness();
    let downloads = 0;
    const model = new MockLanguageModelV4({
      supportedUrls: {},
      doGenerate: async () => ({
        content: [{ type: "text", text: "seen" }],
        finishReason: { unified: "stop", raw: undefined },
        usage: USAGE,
        warnings: [],
      }),
    });
    const ai = kitFor(h, {
      limits: { "*": { tokensPerMinute: 10_000 } },
      maxInProcessWaitMs: 0,
    });
    const download = async (reqs: Array<{ url: URL }>) => {
      downloads++;
      if (downloads <= 2) throw new Error(`the file server is down (${reqs[0]!.url.host})`);
      return reqs.map(() => ({ data: new Uint8Array([1, 2, 3]), mediaType: "image/png" }));
    };
    const wf = workflow({ name: "failed-download", version: "1" }, async (ctx) => {
      const a = await generateText({
        model: ai.model(ctx, model, {
          name: "with-file",
          download,
          retry: { maxAttempts: 3, initialDelay: 1, jitter: false },
        }),
        maxOutputTokens: 3_000,
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "look" },
              {
                type: "file",
                data: new URL("https://files.example/a.png"),
                mediaType: "image/png",
              },
            ],
          },
        ],
      });
      const b = await generateText({
        model: ai.model(ctx, model, { name: "after" }),
        maxOutputTokens: 3_000,
        prompt: "and now",
      });
      return `${a.text} ${b.text}`;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const ended = await advanceUntil(
      h.clock,
      until(async () => {
        const i = await run.info();
        if (i?.status === "completed" || i?.status === "failed") return i.status;
        const steps = await engine.getSteps(run.id);
        return steps.some((st) => st.key.endsWith(":throttled")) ? "throttled" : undefined;
      }, "the run completed or a call was throttled"),
      5,
    );
    expect(downloads).toBe(3);
    expect(ended).toBe("completed");
    expect(await run.result()).toBe("seen seen");
    const attempts = (await engine.getSteps(run.id)).find((st) => st.key === "with-file");
    expect(attempts?.attempts.map((a) => a.error?.message)).toEqual([
      "the file server is down (files.example)",
      "the file server is down (files.example)",
      undefined,
    ]);
  });
});

describe("a file given as a Node.js Buffer (fs.readFile's)", () => {
  const withFile = (data: Uint8Array) =>
    ({
      prompt: [
        {
          role: "user",
          content: [
            { type: "text", text: "read" },
            { type: "file", data: { type: "data", data }, mediaType: "application/pdf" },
          ],
        },
      ],
    }) as unknown as CallOptions;
  const bytes = new Uint8Array(96 * 1024).map((_, i) => (i * 31 + 200) % 256);

  // The SDK hands a Buffer on as it is (it is a Uint8Array). JSON.stringify calls its
  // toJSON before any replacer sees it, so the bytes were hashed and counted as
  // `{"type":"Buffer","data":[200,231,...]}`: another digest than the same bytes as a
  // Uint8Array, and 3 times their base64 in the limiter's estimate.
  it("has the digest and the estimate of the same bytes as a Uint8Array; calls recorded before still replay", async () => {
    const asArray = readRequest(withFile(bytes), true);
    const asBuffer = readRequest(withFile(Buffer.from(bytes)), true);
    expect(asBuffer.digest).toBe(asArray.digest);
    expect(asBuffer.promptChars).toBe(asArray.promptChars);
    expect(asBuffer.hasBytes).toBe(true);
    expect(asBuffer.promptChars).toBeLessThan(Math.ceil(bytes.length / 3) * 4 + 200);

    // And a call recorded while a Buffer was hashed as its JSON text still replays.
    const path = `${db.path}-buffer`;
    let calls = 0;
    let asked: CallOptions | undefined;
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        asked ??= o as unknown as CallOptions;
        calls++;
        return {
          content: [{ type: "text", text: "read" }],
          finishReason: { unified: "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = createAi({ store: sqliteStore(path) });
    const wf = workflow({ name: "buffer-file", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "Read this" },
              { type: "file", data: Buffer.from(bytes), mediaType: "application/pdf" },
            ],
          },
        ],
      });
      await ctx.waitForEvent("go");
      return r.text;
    });
    const engine = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 10 });
    const raw = new Database(path);
    try {
      const runs = [await engine.start(wf, null), await engine.start(wf, null)];
      await until(async () => {
        const infos = await Promise.all(runs.map((r) => r.info()));
        return infos.every((i) => i?.status === "waiting");
      }, "both runs wait");
      expect(calls).toBe(2);
      runs.forEach((run) => {
        const row = raw
          .prepare("SELECT result FROM steps WHERE run_id = ? AND key = ?")
          .get(run.id, "model:mock-model-id") as { result: string };
        const rec = decode<Record<string, unknown>>(row.result);
        expect(rec.u).toBe(1);
        // The digest of the JSON text, a Buffer as its toJSON gives it: what cairn wrote
        // before it hashed a file's bytes as bytes (records without u).
        const o = asked!;
        const text = JSON.stringify([
          o.prompt,
          o.tools?.map((t) => ("name" in t ? t.name : "")),
          o.toolChoice,
          o.responseFormat,
        ]);
        expect(text).toContain('"type":"Buffer"');
        rec.d = createHash("sha256").update(text).digest("base64url").slice(0, 16);
        delete rec.u;
        raw
          .prepare("UPDATE steps SET result = ? WHERE run_id = ? AND key = ?")
          .run(encode(rec), run.id, "model:mock-model-id");
      });
      for (const run of runs) await engine.sendEvent(run.id, "go", null);
      expect(await runs[0]!.result()).toBe("read");
      expect(await runs[1]!.result()).toBe("read");
      expect(calls).toBe(2);
    } finally {
      raw.close();
      await engine.close();
      await ai.close();
    }
  });
});

describe("two conversations side by side, each with its own tools name", () => {
  // docs/API.md: conversations of one run, one after another or side by side, whose
  // provider numbers tool call ids alike each need their own tools `name`. Side by side
  // that was not enough: both answers held work/call_0 and work/call_1, so the tool call
  // could not tell which answer it came from, was not placed, and with an
  // onToolExecutionStart that awaits I/O the run's first execution failed with
  // NonDeterminismError at turn 2 (the call's input tells which answer it comes from).
  for (const stream of [false, true]) {
    it(`${stream ? "streamText" : "generateText"}: replay exactly after a crash at every boundary`, async () => {
      const fx = createSideEffectCounter();
      const answer = (prompt: MockPrompt): MockAnswer => {
        const turn = turnOf(prompt);
        const base = JSON.stringify(prompt[0]).includes("alpha") ? 1000 : 2000;
        if (turn < 3) {
          return toolCallsAnswer(
            "work",
            [0, 1].map((i) => ({ id: `call_${i}`, input: { n: base + turn * 10 + i } })),
          );
        }
        return textAnswer(toolResultsOf(prompt).join(" "));
      };
      const model = answeringModel(answer);
      const work = tool({
        inputSchema: z.object({ n: z.number() }),
        execute: async ({ n }, options) => {
          fx.record(`work:${n}`, idempotencyKeyOf(options));
          await new Promise((r) => setTimeout(r, ((7 - (n % 10)) * 3) % 7));
          return n % 100;
        },
      });
      const ai = createAi({ store: sqliteStore(`${db.path}-side-${stream}`) });
      const wf = workflow({ name: "side-by-side", version: "1" }, async (ctx) => {
        const talk = async (name: string) => {
          const options = {
            model: ai.model(ctx, model, { name: `model-${name}` }),
            tools: ai.tools(ctx, { work }, { name: `tools-${name}` }),
            prompt: name,
            stopWhen: stepCountIs(6),
            // A log written somewhere before each tool runs (a timer stands for its I/O).
            onToolExecutionStart: async (e: { toolCall: { toolCallId: string } }) => {
              await new Promise((r) => setTimeout(r, e.toolCall.toolCallId === "call_0" ? 4 : 1));
            },
          };
          if (!stream) return (await generateText(options)).text;
          return await streamText(options).text;
        };
        const [a, b] = await Promise.all([talk("alpha"), talk("beta")]);
        return `${a} | ${b}`;
      });
      try {
        const sweep = await crashSweep({
          workflows: [wf],
          workflow: wf,
          input: null,
          sideEffects: fx,
        });
        expect(sweep.baseline.error).toBeUndefined();
        expect(sweep.baseline.output).toBe(
          "call_0=0 call_1=1 call_0=10 call_1=11 call_0=20 call_1=21 | call_0=0 call_1=1 call_0=10 call_1=11 call_0=20 call_1=21",
        );
        expect(sweep.failures).toEqual([]);
        expect(sweep.boundaries.filter((b) => !b.crashed)).toEqual([]);
      } finally {
        await ai.close();
      }
    });
  }
});
