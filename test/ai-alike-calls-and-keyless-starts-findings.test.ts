// Findings on the plain-text refusal of encrypted stores and on tool calls alike in tool, id and input. Each test failed before
// its mend.

import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createAi, idempotencyKeyOf } from "../src/ai/index.js";
import { createHttpApp } from "../src/http/index.js";
import {
  createEngine,
  type EncryptionKey,
  encryptedStore,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { crashSweep, createSideEffectCounter, faultyStore } from "../src/testing/index.js";
import {
  answeringModel,
  type MockAnswer,
  type MockPrompt,
  textAnswer,
  toolCallsAnswer,
  toolResultsOf,
  turnOf,
} from "./helpers/ai-mock.js";
import { call } from "./helpers/http.js";
import { tempDbPath, tempDir, until } from "./helpers/sqlite.js";

const db = tempDbPath();
afterAll(() => db.cleanup());

const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32).toString("base64") });

function storedText(path: string): string {
  const wal = `${path}-wal`;
  return [path, ...(existsSync(wal) ? [wal] : [])].map((p) => readFileSync(p, "latin1")).join("");
}

describe("a server whose engine is on encryptedStore wrapped by another decorator", () => {
  it("writes encrypted, so it is not refused where it lacks a retired key (faultyStore over encryptedStore)", async () => {
    const t = tempDir("keyless-wrapped-enc-");
    const path = join(t.dir, "cairn.db");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ctx.waitForEvent("card"));
    const old = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [key("k1")] }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    try {
      await old.start(wf, { secret: "input" }, { id: "p1" });
      await until(async () => (await old.getSteps("p1")).length > 0, "p1 waits");
    } finally {
      await old.close();
    }
    // k1 retired; the server's store is encryptedStore (k2) under faultyStore, faults off.
    const rotated = createEngine({
      store: faultyStore(encryptedStore(sqliteStore(path), { keys: [key("k2")] })),
      workflows: [wf],
      worker: false,
    });
    const app = createHttpApp({ engine: rotated });
    try {
      const onOld = await call(app.fetch, "POST", "/api/runs/p1/events/other", {
        body: "SECRET-later",
      });
      const fresh = await call(app.fetch, "POST", "/api/runs", {
        body: { workflow: "wf", input: "SECRET-fresh", id: "p2" },
      });
      expect([onOld.status, fresh.status]).toEqual([201, 201]);
      expect(storedText(path)).not.toContain("SECRET");
    } finally {
      app.close();
      await rotated.close();
      t.cleanup();
    }
  });
});

describe("a store that turned encryption off (its workers now write plain text)", () => {
  it("lets a server without keys start a run once a newer run than the encrypted ones was finished in plain text", async () => {
    const t = tempDir("keyless-enc-off-");
    const path = join(t.dir, "cairn.db");
    const wf = workflow({ name: "wf", version: "1" }, async (ctx) => ({ done: ctx.runId }));
    const keyed = createEngine({
      store: encryptedStore(sqliteStore(path), { keys: [key("k1")] }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    try {
      const h = await keyed.start(wf, "old", { id: "e1" });
      await h.result();
    } finally {
      await keyed.close();
    }
    // Encryption turned off: the workers have no keys now, and finish runs in plain text.
    // The store's mark that it encrypts (written when encryptedStore opened it) is removed
    // by whoever turns encryption off: with it, every keyless write would be refused.
    const unmark = sqliteStore(path);
    await unmark.open({ clock: realClock });
    await unmark.unmarkEncrypted?.();
    await unmark.close();
    const plain = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 10 });
    const app = createHttpApp({ engine: plain });
    try {
      const h = await plain.start(wf, "new", { id: "p1" });
      await h.result();
      expect((await plain.getRun("p1"))?.output).toEqual({ done: "p1" });
      const started = await call(app.fetch, "POST", "/api/runs", {
        body: { workflow: "wf", input: "fine in plain text", id: "p2" },
      });
      expect(started.status).toBe(201);
    } finally {
      app.close();
      await plain.close();
      t.cleanup();
    }
  });
});

describe("two conversations side by side whose tool calls are alike in tool, id and input", () => {
  // Each with its own tools name, as docs/API.md asks. The input cannot tell which answer a
  // call comes from; the tools name it is made through, and the conversation its model
  // call continued, can.
  for (const stream of [false, true]) {
    it(`${stream ? "streamText" : "generateText"}: replay exactly after a crash at every boundary`, async () => {
      const fx = createSideEffectCounter();
      const answer = (prompt: MockPrompt): MockAnswer => {
        const turn = turnOf(prompt);
        const base = 1000; // the same inputs in both conversations
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
      const ai = createAi({ store: sqliteStore(`${db.path}-same-${stream}`) });
      const wf = workflow({ name: "side-by-side-same", version: "1" }, async (ctx) => {
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
