// The replay core as a function of a journal: hand-built journals in, the workflow's
// outcome and the records it writes out. No store, no engine, no worker.

import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { emptyJournal, testContextHost } from "../../test/helpers/context-host.js";
import { encode } from "../codec/codec.js";
import type { NonDeterminismError } from "../errors.js";
import type {
  AttemptRecord,
  EventRecord,
  IntentRecord,
  Journal,
  RunWrite,
  StepRecord,
} from "../store/store.js";
import { APPROVAL_EVENT_PREFIX } from "./approval-calls.js";
import type { ApprovalAnswer } from "./approval-outcome.js";
import { childInputDigests } from "./child-identity.js";
import { Context, type ContextHost, type Outcome } from "./context.js";
import type { WorkflowContext } from "./context-types.js";

type Fn = (ctx: WorkflowContext) => Promise<unknown>;

function rec(
  key: string,
  o: Partial<StepRecord> & { value?: unknown; delivery: number | null; issuedAfter: number },
): StepRecord {
  return {
    runId: "r",
    key,
    generation: 0,
    seq: 0,
    name: key.replace(/#\d+$/, ""),
    kind: "step",
    outcome: o.error ? "error" : "ok",
    result: o.error ? null : encode(o.value),
    error: null,
    spend: {},
    attempt: 1,
    startedAt: 0,
    completedAt: 0,
    issuedLate: false,
    ...o,
  };
}

async function execute(
  fn: Fn,
  journal: Journal = emptyJournal(),
  over: Partial<ContextHost> = {},
): Promise<{ outcome: Outcome; writes: RunWrite[]; steps: StepRecord[] }> {
  const writes: RunWrite[] = [];
  const host = testContextHost(writes, over);
  const outcome = await new Context(host, journal).start(fn as never, undefined);
  return { outcome, writes, steps: writes.flatMap((w) => w.steps ?? []) };
}

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("resume after two failures", () => {
  it("a call the workflow made after a failure was handed over goes free on the next resume", async () => {
    // Review finding: generation 0 failed at B; generation 1 failed at C, after calling
    // "cleanup" in its catch block; generation 2 runs C again, which succeeds, so cleanup is
    // not called. Positions have a gap (B's replaced failure), windows do not.
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: "a", delivery: 0, issuedAfter: 0 }),
      rec("b", {
        error: { name: "FatalError", message: "b" },
        delivery: 1,
        issuedAfter: 1,
      }),
      rec("b", { value: "b", delivery: 2, issuedAfter: 1, generation: 1 }),
      rec("c", {
        error: { name: "FatalError", message: "c" },
        delivery: 3,
        issuedAfter: 2,
        generation: 1,
      }),
      rec("cleanup", { value: "cleaned", delivery: 4, issuedAfter: 3, generation: 1 }),
    ];
    const ran: string[] = [];
    const { outcome } = await execute(
      async (ctx) => {
        await ctx.step("a", () => ran.push("a"));
        await ctx.step("b", () => ran.push("b"));
        try {
          return await ctx.step("c", () => {
            ran.push("c");
            return "c";
          });
        } catch (e) {
          await ctx.step("cleanup", () => ran.push("cleanup"));
          throw e;
        }
      },
      journal,
      {
        generation: 2,
        failedCalls: [
          { key: "b", generation: 0 },
          { key: "c", generation: 1 },
        ],
      },
    );
    expect(outcome).toEqual({ kind: "completed", output: "c" });
    expect(ran).toEqual(["c"]);
  });
});

describe("effects and the lease", () => {
  it("a worker that cannot be sure of its lease does not perform an effect", async () => {
    // A worker stopped past its lease (SIGSTOP) wakes between the intent and perform: another
    // worker may already have taken the run over, reconciled and performed.
    const performed: string[] = [];
    const { outcome, steps } = await execute(
      async (ctx) =>
        ctx.effect("open-pr", {
          perform: async () => {
            performed.push("pr");
            return 1;
          },
          reconcile: async () => undefined,
        }),
      emptyJournal(),
      { leaseFresh: () => false },
    );
    expect(outcome.kind).toBe("lease-lost");
    expect(performed).toEqual([]);
    expect(steps).toEqual([]);
  });
});

describe("resume after a failure", () => {
  it("a race loser issued before the failure, recorded after it, still loses on resume", async () => {
    // Generative finding (ip-sqlite:148): generation 0 handed over w (0), then boom's error
    // (1), which failed the run; the loser l, issued at the race, finished after that (2).
    // Generation 1 executes boom again: l is part of the history before the failure and
    // keeps its place in the order; handed over as soon as called, it would win the race.
    const journal = emptyJournal();
    journal.steps = [
      rec("w", { value: "w", delivery: 0, issuedAfter: 0, issuedLate: true }),
      rec("l", { value: "l", delivery: 2, issuedAfter: 0, issuedLate: true }),
      rec("boom", { error: { name: "FatalError", message: "boom" }, delivery: 1, issuedAfter: 1 }),
    ];
    const ran: string[] = [];
    const { outcome } = await execute(
      async (ctx) => {
        // Made after I/O of its own (outside any cascade), the winner's call a turn later.
        await tick(1);
        const winner = await Promise.race([
          (async () => {
            await null;
            return ctx.step("w", () => ran.push("w"));
          })(),
          ctx.step("l", () => ran.push("l")),
        ]);
        await ctx.step("boom", () => ran.push("boom"));
        return winner;
      },
      journal,
      { generation: 1, failedCalls: [{ key: "boom", generation: 0 }] },
    );
    expect(outcome).toEqual({ kind: "completed", output: "w" });
    expect(ran).toEqual(["boom"]);
  });
});

describe("ordered delivery", () => {
  it("a first run records outcomes in the order they arrived, and each call's window", async () => {
    const { outcome, steps } = await execute(async (ctx) =>
      Promise.all(
        [30, 1].map(async (ms, i) => {
          const page = await ctx.step("fetch", async () => {
            await tick(ms);
            return i;
          });
          return ctx.step("summarize", () => `sum ${page}`);
        }),
      ),
    );
    expect(outcome).toEqual({ kind: "completed", output: ["sum 0", "sum 1"] });
    const byKey = Object.fromEntries(steps.map((s) => [s.key, s]));
    // The second branch's fetch finished first: it was handed over first, its summarize
    // was called first (the plain name) and finished before the first branch's fetch.
    expect(byKey["fetch#2"]).toMatchObject({ delivery: 0, issuedAfter: 0 });
    expect(byKey.summarize).toMatchObject({ delivery: 1, issuedAfter: 1, result: encode("sum 1") });
    expect(byKey.fetch).toMatchObject({ delivery: 2, issuedAfter: 0 });
    expect(byKey["summarize#2"]).toMatchObject({
      delivery: 3,
      issuedAfter: 3,
      result: encode("sum 0"),
    });
  });

  it("a replay hands the recorded outcomes over in their order: each branch gets its own", async () => {
    const journal = emptyJournal();
    journal.steps = [
      rec("fetch", { value: 0, delivery: 1, issuedAfter: 0 }),
      rec("fetch#2", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("summarize", { value: "sum 1", delivery: 2, issuedAfter: 1 }),
      rec("summarize#2", { value: "sum 0", delivery: 3, issuedAfter: 2 }),
    ];
    let bodies = 0;
    const { outcome, writes } = await execute(
      async (ctx) =>
        Promise.all(
          [0, 1].map(async (i) => {
            const page = await ctx.step("fetch", () => {
              bodies++;
              return i;
            });
            return ctx.step("summarize", () => {
              bodies++;
              return `sum ${page}`;
            });
          }),
        ),
      journal,
    );
    expect(outcome).toEqual({ kind: "completed", output: ["sum 0", "sum 1"] });
    expect(bodies).toBe(0);
    expect(writes).toEqual([]);
  });

  it("a race replays its recorded winner, whichever record the replay finds first", async () => {
    const race: Fn = async (ctx) =>
      Promise.race([
        ctx.sleep("deadline", 100).then(() => "deadline"),
        ctx.step("generate", () => "text").then(() => "generated"),
      ]);
    for (const [sleepAt, stepAt, winner] of [
      [0, 1, "deadline"],
      [1, 0, "generated"],
    ] as const) {
      const journal = emptyJournal();
      journal.steps = [
        rec("deadline", { kind: "sleep", value: undefined, delivery: sleepAt, issuedAfter: 0 }),
        rec("generate", { value: "text", delivery: stepAt, issuedAfter: 0 }),
      ];
      const { outcome, writes } = await execute(race, journal);
      expect(outcome).toEqual({ kind: "completed", output: winner });
      expect(writes).toEqual([]);
    }
  });
});

describe("divergence", () => {
  it("a recorded call not made at its point fails the run before the new call executes", async () => {
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("b", { value: 2, delivery: 1, issuedAfter: 1 }),
    ];
    let xRan = false;
    const { outcome, writes } = await execute(async (ctx) => {
      await ctx.step("a", () => 1);
      await ctx.step("x", () => {
        xRan = true;
      });
    }, journal);
    expect(outcome.kind).toBe("failed");
    const err = (outcome as { error: Error }).error;
    expect(err.name).toBe("NonDeterminismError");
    expect(err.message).toMatch(/recorded step "b" \(key "b".*called step "x" \(key "x"\) instead/);
    expect(xRan).toBe(false);
    expect(writes).toEqual([]);
  });

  it("a call recorded inside a cascade, not made by the end of that cascade, is divergence", async () => {
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("b", { value: 2, delivery: 1, issuedAfter: 1 }),
    ];
    const ran: string[] = [];
    const { outcome } = await execute(async (ctx) => {
      await ctx.step("a", () => 1);
      return ctx.step("c", () => ran.push("c"));
    }, journal);
    expect(outcome.kind).toBe("failed");
    expect((outcome as { error: Error }).error.message).toMatch(
      /recorded step "b" \(key "b", call #1\), which the code did not call at that point; it called step "c"/,
    );
    // The divergent new call never executed; the error names the run and the key as fields.
    expect(ran).toEqual([]);
    expect((outcome as unknown as { error: NonDeterminismError }).error).toMatchObject({
      code: "NON_DETERMINISM",
      runId: "r",
      key: "b",
    });
  });

  it("a call made in a cascade after a timer of the workflow's own fired is still demanded by that cascade's end", async () => {
    // Generative finding (nd-ip:32, nd-sk:35): "b" is called after a timer, so its cascade
    // may continue work of the workflow's own. The first run recorded the call made in it
    // as late, which exempted it from the end-of-cascade check: a replay that called another
    // name there executed and recorded it, then waited for the recorded call for ever.
    const ran: string[] = [];
    const program = (name: string) => async (ctx: WorkflowContext) => {
      await ctx.step("a", () => 1);
      await tick(2);
      await ctx.step("b", () => 2);
      return ctx.step(name, () => ran.push(name));
    };
    const first = await execute(program("nd-first"));
    expect(first.outcome.kind).toBe("completed");
    expect(first.steps.map((s) => [s.key, s.issuedAfter, s.issuedLate])).toEqual([
      ["a", 0, false],
      ["b", 1, true],
      ["nd-first", 2, false],
    ]);
    const journal = emptyJournal();
    journal.steps = first.steps;
    const replay = await execute(program("nd-second"), journal);
    expect(replay.outcome.kind).toBe("failed");
    expect((replay.outcome as { error: Error }).error.message).toMatch(
      /recorded step "nd-first" \(key "nd-first", call #3\), which the code did not call at that point; it called step "nd-second"/,
    );
    expect(ran).toEqual(["nd-first"]);
    expect(replay.writes).toEqual([]);
  });

  it("a new call waits while the replay waits for a call the first run made after its own I/O", async () => {
    // The late "nd-first" may yet come (its own work could be slow), so the late "nd-second"
    // must not execute before the verdict: here the stall fails the run, nothing written.
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("nd-first", { value: 2, delivery: 1, issuedAfter: 1, issuedLate: true }),
    ];
    const ran: string[] = [];
    const { outcome, writes } = await execute(
      async (ctx) => {
        await ctx.step("a", () => 1);
        await tick(2);
        return ctx.step("nd-second", () => ran.push("nd-second"));
      },
      journal,
      { replayStallMs: 200 },
    );
    expect(outcome.kind).toBe("failed");
    expect((outcome as { error: Error }).error.message).toMatch(
      /next recorded outcome is step "nd-first" \(key "nd-first"\), but the code has not called it/,
    );
    expect(ran).toEqual([]);
    expect(writes).toEqual([]);
  });

  it("a call the first run made after its own I/O, not made before the workflow returns, is divergence", async () => {
    // Generative finding (nd-sk:18): late calls were exempt from the end-of-run check, so
    // code that skipped one on the replay completed the run as if it matched its journal.
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("nd", { value: 2, delivery: 1, issuedAfter: 1, issuedLate: true }),
    ];
    const { outcome, writes } = await execute(
      async (ctx) => {
        await ctx.step("a", () => 1);
        await tick(2);
        return "done";
      },
      journal,
      { replayStallMs: 200 },
    );
    expect(outcome.kind).toBe("failed");
    expect((outcome as unknown as { error: NonDeterminismError }).error).toMatchObject({
      code: "NON_DETERMINISM",
      key: "nd",
    });
    expect(writes).toEqual([]);
  });

  it("a late call of a branch the workflow did not await is waited for once the workflow returns", async () => {
    // The first run made "late" before returning; the replay returns first (its timer is
    // still pending) and completes once the branch has made the call, as it did.
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("b", { value: 2, delivery: 1, issuedAfter: 0 }),
      rec("late", { value: 3, delivery: 2, issuedAfter: 2, issuedLate: true }),
    ];
    let made = false;
    const { outcome, writes } = await execute(async (ctx) => {
      void (async () => {
        await ctx.step("a", () => 1);
        await tick(30);
        made = true;
        await ctx.step("late", () => 3);
      })().catch(() => {});
      return ctx.step("b", () => 2);
    }, journal);
    expect(outcome).toEqual({ kind: "completed", output: 2 });
    expect(made).toBe(true);
    expect(writes).toEqual([]);
  });

  it("a divergence is not held back for ever by a timer the workflow never clears", async () => {
    // Review finding: an interval kept the workflow "busy", so the postponed check never ran.
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("b", { value: 2, delivery: 1, issuedAfter: 1 }),
    ];
    const ran: string[] = [];
    let interval: NodeJS.Timeout | undefined;
    const { outcome } = await execute(
      async (ctx) => {
        interval = setInterval(() => {}, 5);
        await ctx.step("a", () => 1);
        return ctx.step("c", () => ran.push("c"));
      },
      journal,
      { replayStallMs: 200 },
    );
    clearInterval(interval);
    expect(outcome.kind).toBe("failed");
    expect((outcome as unknown as { error: Error }).error.message).toMatch(
      /recorded step "b" \(key "b", call #1\), which the code did not call at that point/,
    );
    expect(ran).toEqual([]);
  });

  it("a call recorded inside a cascade and made after a timer of the workflow's own on replay is no divergence", async () => {
    // Code that joins an outcome with its own work (Promise.all of a step and a timer) makes
    // its next call once both are done: in the first run's cascade, or later on a replay.
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("b", { value: 2, delivery: 1, issuedAfter: 1 }),
    ];
    const ran: string[] = [];
    const { outcome } = await execute(async (ctx) => {
      await Promise.all([ctx.step("a", () => ran.push("a")), tick(20)]);
      return ctx.step("b", () => ran.push("b"));
    }, journal);
    expect(outcome).toEqual({ kind: "completed", output: 2 });
    expect(ran).toEqual([]);
  });

  it("a call recorded after I/O is waited for: a new call in another branch is no divergence", async () => {
    const journal = emptyJournal();
    journal.steps = [
      rec("a", { value: 1, delivery: 0, issuedAfter: 0 }),
      rec("c", { value: 3, delivery: 1, issuedAfter: 0 }),
      rec("b", { value: 2, delivery: 2, issuedAfter: 1, issuedLate: true }),
    ];
    const ran: string[] = [];
    const { outcome, steps } = await execute(
      async (ctx) =>
        Promise.all([
          (async () => {
            await ctx.step("a", () => ran.push("a"));
            await tick(20);
            return ctx.step("b", () => ran.push("b"));
          })(),
          (async () => {
            await ctx.step("c", () => ran.push("c"));
            return ctx.step("d", () => ran.push("d"));
          })(),
        ]),
      journal,
    );
    expect(outcome).toEqual({ kind: "completed", output: [2, 1] });
    expect(ran).toEqual(["d"]);
    expect(steps.map((s) => [s.key, s.delivery])).toEqual([["d", 3]]);
  });

  it("a name reused by branches whose order is timing fails the first run", async () => {
    const { outcome, writes } = await execute(async (ctx) =>
      Promise.all(
        [5, 1].map(async (ms, i) => {
          await tick(ms);
          return ctx.step("summarize", () => i);
        }),
      ),
    );
    expect(outcome.kind).toBe("failed");
    expect((outcome as { error: Error }).error.message).toMatch(
      /calls step "summarize" again, and cairn cannot tell/,
    );
    // The first of the two may have been recorded; the second never ran.
    expect(writes.flatMap((w) => w.steps ?? []).length).toBeLessThanOrEqual(1);
  });

  it("a helper that awaits I/O before its call: fine in a loop (the caller continues after the earlier call's outcome), refused from concurrent branches unless named per item", async () => {
    const summarize = async (ctx: WorkflowContext, name: string, i: number) => {
      await tick(1 + i * 5); // the helper's own await, before the call
      return ctx.step(name, () => i);
    };
    const looped = await execute(async (ctx) => {
      const out: number[] = [];
      for (let i = 0; i < 2; i++) out.push(await summarize(ctx, "summarize", i));
      return out;
    });
    expect(looped.outcome).toEqual({ kind: "completed", output: [0, 1] });
    const refused = await execute(async (ctx) =>
      Promise.all([0, 1].map((i) => summarize(ctx, "summarize", i))),
    );
    expect(refused.outcome.kind).toBe("failed");
    expect((refused.outcome as { error: Error }).error.message).toMatch(
      /a helper function that awaited something before making the call/,
    );
    const named = await execute(async (ctx) =>
      Promise.all([0, 1].map((i) => summarize(ctx, `summarize:${i}`, i))),
    );
    expect(named.outcome).toEqual({ kind: "completed", output: [0, 1] });
  });

  it("the same name in one causal chain, with I/O in between, is fine", async () => {
    const { outcome, steps } = await execute(async (ctx) => {
      const out: number[] = [];
      for (let i = 0; i < 3; i++) {
        await tick(1);
        out.push(await ctx.step("poll", () => i));
      }
      return out;
    });
    expect(outcome).toEqual({ kind: "completed", output: [0, 1, 2] });
    expect(steps.map((s) => [s.key, s.issuedLate])).toEqual([
      ["poll", true],
      ["poll#2", true],
      ["poll#3", true],
    ]);
  });
});

describe("failures as records", () => {
  it("a step's final error is recorded before the workflow sees it, and replayed", async () => {
    const fails: Fn = async (ctx) => {
      try {
        await ctx.step("notify", () => {
          throw Object.assign(new Error("refused"), { code: "FATAL" });
        });
      } catch (e) {
        return `caught ${(e as Error).message}`;
      }
      return "not caught";
    };
    const first = await execute(fails);
    expect(first.outcome).toEqual({ kind: "completed", output: "caught refused" });
    const notify = first.steps.find((s) => s.key === "notify");
    expect(notify).toMatchObject({ outcome: "error", delivery: 0, error: { message: "refused" } });
    expect(first.writes.flatMap((w) => w.attempts ?? [])).toHaveLength(1);

    const journal = emptyJournal();
    journal.steps = first.steps;
    journal.attempts = first.writes.flatMap((w) => w.attempts ?? []);
    let ran = 0;
    const replay = await execute(async (ctx) => {
      try {
        await ctx.step("notify", () => {
          ran++;
        });
      } catch (e) {
        return `caught ${(e as Error).message}`;
      }
      return "not caught";
    }, journal);
    expect(replay.outcome).toEqual({ kind: "completed", output: "caught refused" });
    expect(ran).toBe(0);
    expect(replay.writes).toEqual([]);
  });

  it("after a resume, only the call whose error failed the run executes again", async () => {
    const journal = emptyJournal();
    journal.steps = [
      rec("caught", { error: { name: "Error", message: "c" }, delivery: 0, issuedAfter: 0 }),
      rec("failed", { error: { name: "Error", message: "f" }, delivery: 1, issuedAfter: 1 }),
    ];
    const ran: string[] = [];
    const wf: Fn = async (ctx) => {
      await ctx.step("caught", () => ran.push("caught")).catch(() => {});
      return ctx.step("failed", () => {
        ran.push("failed");
        return "ok now";
      });
    };
    const { outcome, steps } = await execute(wf, journal, {
      generation: 1,
      failedCalls: [{ key: "failed", generation: 0 }],
    });
    expect(outcome).toEqual({ kind: "completed", output: "ok now" });
    expect(ran).toEqual(["failed"]);
    expect(steps).toHaveLength(1);
    expect(steps[0]).toMatchObject({ key: "failed", generation: 1, outcome: "ok", delivery: 2 });
  });

  it("an uncaught call error names its key as the run's failed call", async () => {
    const { outcome } = await execute(async (ctx) => {
      await ctx.step("boom", () => {
        throw Object.assign(new Error("no"), { code: "FATAL" });
      });
    });
    expect(outcome).toMatchObject({ kind: "failed", failedKeys: ["boom"] });
  });
});

describe("retries: the recorded attempts propose, the policy decides", () => {
  const now = Date.UTC(2026, 0, 1);
  const noBackoff = { retry: { initialDelay: 0, jitter: false } };

  function attempt(n: number, retryAt: number | null, message = `try ${n}`): AttemptRecord {
    return {
      runId: "r",
      key: "flaky",
      attempt: n,
      generation: 0,
      startedAt: n,
      endedAt: n,
      error: { name: "Error", message },
      spend: {},
      retryAt,
    };
  }

  it("records each failed attempt with its retryAt, then completes on a later attempt", async () => {
    const seen: number[] = [];
    const { outcome, writes, steps } = await execute(
      async (ctx) =>
        ctx.step("flaky", (s) => {
          seen.push(s.attempt);
          if (s.attempt < 3) throw new Error(`try ${s.attempt}`);
          return "done";
        }),
      emptyJournal(),
      noBackoff,
    );
    expect(outcome).toEqual({ kind: "completed", output: "done" });
    expect(seen).toEqual([1, 2, 3]);
    // Each failure is its own write, before the next attempt starts.
    expect(writes.map((w) => w.attempts?.map((a) => a.attempt))).toEqual([[1], [2], undefined]);
    expect(writes[0]?.attempts?.[0]).toMatchObject({
      error: { message: "try 1" },
      retryAt: now,
    });
    expect(steps).toEqual([expect.objectContaining({ key: "flaky", outcome: "ok", attempt: 3 })]);
  });

  it("a journal's final attempt gives up without running the body again", async () => {
    const journal = emptyJournal();
    journal.attempts = [attempt(1, null, "refused")];
    let ran = 0;
    const { outcome, steps } = await execute(
      async (ctx) => ctx.step("flaky", () => ran++),
      journal,
    );
    expect(ran).toBe(0);
    expect(outcome).toMatchObject({ kind: "failed", failedKeys: ["flaky"] });
    expect((outcome as { error: Error }).error.message).toBe("refused");
    expect(steps).toEqual([
      expect.objectContaining({
        outcome: "error",
        attempt: 1,
        startedAt: 1,
        error: attempt(1, null, "refused").error,
      }),
    ]);
  });

  it("maxAttempts recorded attempts give up with the last one's error", async () => {
    const journal = emptyJournal();
    journal.attempts = [attempt(1, 1), attempt(2, 2), attempt(3, 3)];
    let ran = 0;
    const { outcome, steps } = await execute(
      async (ctx) => ctx.step("flaky", () => ran++),
      journal,
    );
    expect(ran).toBe(0);
    expect((outcome as { error: Error }).error.message).toBe("try 3");
    expect(steps[0]).toMatchObject({ outcome: "error", attempt: 3 });
  });

  it("a journal's retryable attempt runs the next one as attempt 2", async () => {
    const journal = emptyJournal();
    journal.attempts = [attempt(1, now - 1)];
    const { outcome, steps } = await execute(
      async (ctx) => ctx.step("flaky", (s) => s.attempt),
      journal,
    );
    expect(outcome).toEqual({ kind: "completed", output: 2 });
    expect(steps[0]).toMatchObject({ attempt: 2 });
  });

  it("after a crash, the call in flight is charged a WORKER_LOST attempt first", async () => {
    const { outcome, writes } = await execute(
      async (ctx) => ctx.step("flaky", (s) => s.attempt),
      emptyJournal(),
      { recovered: true, ...noBackoff },
    );
    expect(outcome).toEqual({ kind: "completed", output: 2 });
    expect(writes[0]?.attempts).toEqual([
      {
        runId: "r",
        key: "flaky",
        generation: 0,
        attempt: 1,
        startedAt: now,
        endedAt: now,
        error: expect.objectContaining({ name: "WorkerLostError", code: "WORKER_LOST" }),
        spend: {},
        retryAt: now,
      },
    ]);
    expect(writes[1]?.steps?.[0]).toMatchObject({ key: "flaky", attempt: 2 });
  });

  it("a crash on the last allowed attempt fails the call without running it again", async () => {
    let ran = 0;
    const { outcome, steps } = await execute(
      async (ctx) => ctx.step("flaky", () => ran++, { retry: { maxAttempts: 1 } }),
      emptyJournal(),
      { recovered: true },
    );
    expect(ran).toBe(0);
    expect((outcome as { error: Error }).error.name).toBe("WorkerLostError");
    expect(steps[0]).toMatchObject({ outcome: "error", attempt: 1 });
  });

  it("a value that cannot be stored fails the call at once, its attempt in the same write", async () => {
    let ran = 0;
    const { outcome, writes } = await execute(
      async (ctx) =>
        ctx.step("flaky", () => {
          ran++;
          return () => "a function";
        }),
      emptyJournal(),
      noBackoff,
    );
    expect(ran).toBe(1);
    expect((outcome as { error: Error }).error.name).toBe("SerializationError");
    expect(writes).toHaveLength(1);
    expect(writes[0]?.attempts).toEqual([expect.objectContaining({ attempt: 1, retryAt: null })]);
    expect(writes[0]?.steps).toEqual([
      expect.objectContaining({
        outcome: "error",
        attempt: 1,
        error: writes[0]?.attempts?.[0]?.error,
      }),
    ]);
  });
});

describe("approvals", () => {
  const now = Date.UTC(2026, 0, 1);
  const event = `${APPROVAL_EVENT_PREFIX}ship`;

  function intent(deadline: number | null, onTimeout: "approve" | "reject"): IntentRecord {
    return {
      runId: "r",
      key: "ship",
      kind: "approval",
      name: "ship",
      data: encode({ deadline, event, onTimeout }),
      createdAt: 5,
    };
  }

  function answer(seq: number, createdAt: number, a: ApprovalAnswer): EventRecord {
    const payload = encode(a);
    return {
      seq,
      runId: "r",
      name: event,
      payload,
      createdAt,
      consumedBy: null,
      idempotencyKey: null,
    };
  }

  const ask: Fn = async (ctx) => ctx.approval("ship", { request: { pr: 7 }, timeout: "1m" });

  it("a first execution records its intent with the deadline, asks, and suspends", async () => {
    const asked: unknown[] = [];
    const { outcome, writes } = await execute(ask, emptyJournal(), {
      requestApproval: async (p) => {
        asked.push(p);
      },
    });
    expect(outcome).toEqual({ kind: "suspended", wakeAt: now + 60_000, waitingFor: [event] });
    expect(writes).toEqual([
      {
        runId: "r",
        epoch: 1,
        intents: [
          {
            runId: "r",
            key: "ship",
            kind: "approval",
            name: "ship",
            data: encode({
              deadline: now + 60_000,
              event,
              onTimeout: "reject",
              // The request as asked, by its digest (matchAsking compares it on a replay).
              request: childInputDigests({ pr: 7 }).input,
            }),
            createdAt: now,
          },
        ],
      },
    ]);
    expect(asked).toEqual([
      {
        key: "ship",
        name: "ship",
        request: encode({ pr: 7 }),
        requestedAt: now,
        deadline: now + 60_000,
        onTimeout: "reject",
      },
    ]);
  });

  it("an answer in the journal's events is recorded and handed over, consuming the event", async () => {
    const journal = emptyJournal();
    journal.intents = [intent(null, "reject")];
    journal.events = [answer(3, 7, { decision: "approved", by: "ana", comment: null, via: "cli" })];
    const { outcome, writes } = await execute(ask, journal);
    const result = {
      approved: true,
      decision: "approved",
      timedOut: false,
      by: "ana",
      at: new Date(7),
      via: "cli",
    };
    expect(outcome).toEqual({ kind: "completed", output: result });
    expect(writes).toHaveLength(1);
    expect(writes[0]?.consume).toEqual([{ eventSeq: 3, key: "ship" }]);
    expect(writes[0]?.intents).toBeUndefined();
    expect(writes[0]?.steps?.[0]).toMatchObject({ key: "ship", kind: "approval", startedAt: 5 });
    expect(writes[0]?.steps?.[0]?.result).toBe(encode(result));
  });

  it("past the deadline, an answer stored after it does not count: onTimeout decides", async () => {
    const journal = emptyJournal();
    journal.intents = [intent(10, "approve")];
    journal.events = [
      answer(3, 11, { decision: "rejected", by: "bo", comment: "late", via: "cli" }),
    ];
    let reloads = 0;
    const askOrApprove: Fn = async (ctx) =>
      ctx.approval("ship", { request: { pr: 7 }, timeout: "1m", onTimeout: "approve" });
    const { outcome, writes } = await execute(askOrApprove, journal, {
      loadEvents: async () => {
        reloads++;
        return [];
      },
    });
    expect(reloads).toBe(1);
    const result = { approved: true, decision: "approved", timedOut: true, at: new Date(10) };
    expect(outcome).toEqual({ kind: "completed", output: result });
    expect(writes[0]?.consume).toBeUndefined();
    expect(writes[0]?.steps?.[0]?.result).toBe(encode(result));
  });
});

describe("values drawn with ctx.now/random/uuid", () => {
  it("are recorded without a place in the delivery order, and replayed", async () => {
    const first = await execute(async (ctx) => {
      const id = ctx.uuid();
      await ctx.step("use", () => id);
      return id;
    });
    const uuid = first.steps.find((s) => s.key === "@uuid");
    expect(uuid).toMatchObject({ kind: "uuid", delivery: null, issuedAfter: 0 });
    // Written before the step that follows it.
    expect(first.writes[0]?.steps?.[0]?.key).toBe("@uuid");
    const journal = emptyJournal();
    journal.steps = first.steps;
    const replay = await execute(async (ctx) => {
      const id = ctx.uuid();
      await ctx.step("use", () => id);
      return id;
    }, journal);
    expect(replay.outcome).toEqual(first.outcome);
    expect(replay.writes).toEqual([]);
  });
});

describe("resources", () => {
  it("a long run leaves no abort listener behind per attempt", async () => {
    let listeners = -1;
    const { outcome } = await execute(async (ctx) => {
      for (let i = 0; i < 50; i++) await ctx.step("s", () => i, { timeout: "1m" });
      listeners = getEventListeners(ctx.signal, "abort").length;
      return "ok";
    });
    expect(outcome).toEqual({ kind: "completed", output: "ok" });
    expect(listeners).toBe(0);
  });
});
