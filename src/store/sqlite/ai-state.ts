// The SQLite side of the store verbs cairn/ai uses: shared rate limiters (a rolling minute
// of grants per key, plus a block a provider's 429 sets) and run streams (chunks by offset).
// Each writing verb is one BEGIN IMMEDIATE transaction, which already serialises every
// writer of the file, so acquirers of one key and appenders to one run never interleave,
// and an append to a finished run is refused in the transaction that would have made it.

import {
  type AcquireRateOutcome,
  type AppendStreamOutcome,
  blockMs,
  countedTokens,
  grantTokens,
  RATE_WINDOW_MS,
  type RateLimits,
  type RunStatus,
  type StreamChunk,
  TERMINAL_STATUSES,
} from "../store.js";
import { pageCount } from "../verb-arguments.js";
import type { StoreContext } from "./sql.js";

export function acquireRate(
  ctx: StoreContext,
  p: { key: string; grantId: string; tokens: number; limits: RateLimits },
): Promise<AcquireRateOutcome> {
  return ctx.write("acquireRate", ({ prepare, now }): AcquireRateOutcome => {
    const held = prepare("SELECT 1 FROM rate_grants WHERE key = ? AND grant_id = ?").get(
      p.key,
      p.grantId,
    );
    if (held) return { granted: true };
    prepare(
      "INSERT INTO rate_limiters (key, blocked_until) VALUES (?, 0) ON CONFLICT DO NOTHING",
    ).run(p.key);
    const { blocked_until } = prepare("SELECT blocked_until FROM rate_limiters WHERE key = ?").get(
      p.key,
    ) as { blocked_until: number };
    prepare("DELETE FROM rate_grants WHERE key = ? AND at <= ?").run(p.key, now - RATE_WINDOW_MS);
    const tokens = countedTokens(p.tokens, p.limits);
    const inWindow = prepare(
      "SELECT count(*) AS n, coalesce(sum(tokens), 0) AS used FROM rate_grants WHERE key = ?",
    ).get(p.key) as { n: number; used: number };
    let waitUntil = blocked_until;
    const rpm = p.limits.requestsPerMinute;
    if (rpm !== undefined && inWindow.n + 1 > rpm) {
      // Room comes when the oldest (n + 1 - rpm) grants have left the window.
      const row = prepare(
        "SELECT at FROM rate_grants WHERE key = ? ORDER BY at, grant_id LIMIT 1 OFFSET ?",
      ).get(p.key, inWindow.n - rpm) as { at: number } | undefined;
      waitUntil = Math.max(waitUntil, (row?.at ?? now) + RATE_WINDOW_MS);
    }
    const tpm = p.limits.tokensPerMinute;
    if (tpm !== undefined && inWindow.used + tokens > tpm) {
      const excess = inWindow.used + tokens - tpm;
      const row = prepare(
        `SELECT at FROM (SELECT at, sum(tokens) OVER (ORDER BY at, grant_id) AS cum
         FROM rate_grants WHERE key = ?) WHERE cum >= ? ORDER BY at LIMIT 1`,
      ).get(p.key, excess) as { at: number } | undefined;
      waitUntil = Math.max(waitUntil, (row?.at ?? now) + RATE_WINDOW_MS);
    }
    if (waitUntil > now) return { granted: false, waitMs: waitUntil - now };
    prepare("INSERT INTO rate_grants (key, grant_id, at, tokens) VALUES (?, ?, ?, ?)").run(
      p.key,
      p.grantId,
      now,
      tokens,
    );
    return { granted: true };
  });
}

export async function settleRate(
  ctx: StoreContext,
  p: { key: string; grantId: string; tokens: number },
): Promise<void> {
  await ctx.write("settleRate", ({ prepare }) => {
    prepare("UPDATE rate_grants SET tokens = ? WHERE key = ? AND grant_id = ?").run(
      grantTokens(p.tokens),
      p.key,
      p.grantId,
    );
  });
}

export async function blockRate(
  ctx: StoreContext,
  p: { key: string; forMs: number },
): Promise<void> {
  await ctx.write("blockRate", ({ prepare, now }) => {
    prepare(
      `INSERT INTO rate_limiters (key, blocked_until) VALUES (?, ?)
     ON CONFLICT (key) DO UPDATE SET blocked_until = max(blocked_until, excluded.blocked_until)`,
    ).run(p.key, now + blockMs(p.forMs));
  });
}

export function appendStream(
  ctx: StoreContext,
  p: { runId: string; chunks: string[] },
): Promise<AppendStreamOutcome> {
  return ctx.write("appendStream", ({ prepare, now }): AppendStreamOutcome => {
    const run = prepare("SELECT status FROM runs WHERE id = ?").get(p.runId) as
      | { status: RunStatus }
      | undefined;
    if (!run) return { ok: false, reason: "not-found" };
    // In the write transaction that appends: no chunk is stored after the run's finished
    // status (the rule its stream's followers end by: ai/run-stream.ts's lookAtStream).
    if (TERMINAL_STATUSES.has(run.status)) return { ok: false, reason: "finished" };
    const { next } = prepare(
      "SELECT coalesce(max(seq) + 1, 0) AS next FROM run_streams WHERE run_id = ?",
    ).get(p.runId) as { next: number };
    const insert = prepare(
      "INSERT INTO run_streams (run_id, seq, data, created_at) VALUES (?, ?, ?, ?)",
    );
    p.chunks.forEach((data, i) => {
      insert.run(p.runId, next + i, data, now);
    });
    return { ok: true, offset: next };
  });
}

export function readStream(
  ctx: StoreContext,
  p: { runId: string; from: number; limit?: number },
): Promise<StreamChunk[]> {
  return ctx.read("readStream", ({ prepare }) => {
    const rows = prepare(
      `SELECT seq, data, created_at FROM run_streams WHERE run_id = ? AND seq >= ?
     ORDER BY seq LIMIT ?`,
    ).all(p.runId, pageCount(p.from), pageCount(p.limit ?? 1_000)) as Array<{
      seq: number;
      data: string;
      created_at: number;
    }>;
    return rows.map((r) => ({ offset: r.seq, data: r.data, createdAt: r.created_at }));
  });
}
