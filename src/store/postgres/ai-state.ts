// The PostgreSQL side of the store verbs cairn/ai uses: shared rate limiters and run
// streams (migration 7). Every worker of the fleet shares them through the database:
// - acquireRate locks the limiter's row (FOR UPDATE), so acquirers of one key take turns
//   and see one window of grants; other keys are not held up. Time is the store's now.
// - appendStream locks the run's heads row, so offsets are handed out in commit order: a
//   reader that has read up to offset n never later finds a chunk below n. It holds the
//   run's row FOR SHARE and refuses a finished run: a finish (an UPDATE of that row) waits
//   for an append in flight to commit, and an append that comes after sees the finished
//   status, so no chunk is committed after the run's finished status (the rule its
//   followers end by, ai/run-stream.ts's lookAtStream).
//
// Retries after a lost connection: acquireRate is idempotent on its grant id, settleRate
// and blockRate are idempotent by construction, readStream reads. appendStream is retried
// only when it certainly did not commit (a repeat would store its chunks twice).

import { randomUUID } from "node:crypto";
import { TERMINAL_STATUS_LIST } from "../status-sql.js";
import {
  type AcquireRateOutcome,
  type AppendStreamOutcome,
  blockMs,
  countedTokens,
  grantTokens,
  RATE_WINDOW_MS,
  type RateLimits,
  type StreamChunk,
} from "../store.js";
import { pageCount } from "../verb-arguments.js";
import { nowSql, type StoreContext } from "./sql.js";

export async function acquireRate(
  ctx: StoreContext,
  p: { key: string; grantId: string; tokens: number; limits: RateLimits },
): Promise<AcquireRateOutcome> {
  const { db, t } = ctx;
  const tokens = countedTokens(p.tokens, p.limits);
  return db.transaction("acquireRate", "idempotent", async (tx) => {
    await tx.query(`INSERT INTO ${t.rateLimiters} (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`, [
      p.key,
    ]);
    const head = await tx.query<{ blocked_until: string; now: string; held: boolean }>(
      `SELECT l.blocked_until, c.now,
          EXISTS (SELECT 1 FROM ${t.rateGrants} g WHERE g.key = $2 AND g.grant_id = $3) AS held
        FROM ${t.rateLimiters} l, (SELECT ${nowSql(1)} AS now) c
        WHERE l.key = $2 FOR UPDATE OF l`,
      [ctx.clockParam(), p.key, p.grantId],
    );
    const row = head.rows[0]!;
    if (row.held) return { granted: true };
    const now = Number(row.now);
    await tx.query(`DELETE FROM ${t.rateGrants} WHERE key = $1 AND at <= $2`, [
      p.key,
      now - RATE_WINDOW_MS,
    ]);
    const win = await tx.query<{ n: string; used: string }>(
      `SELECT count(*) AS n, coalesce(sum(tokens), 0) AS used FROM ${t.rateGrants} WHERE key = $1`,
      [p.key],
    );
    const n = Number(win.rows[0]?.n ?? 0);
    const used = Number(win.rows[0]?.used ?? 0);
    let waitUntil = Number(row.blocked_until);
    const rpm = p.limits.requestsPerMinute;
    if (rpm !== undefined && n + 1 > rpm) {
      // Room comes when the oldest (n + 1 - rpm) grants have left the window.
      const r = await tx.query<{ at: string }>(
        `SELECT at FROM ${t.rateGrants} WHERE key = $1 ORDER BY at, grant_id LIMIT 1 OFFSET $2`,
        [p.key, n - rpm],
      );
      waitUntil = Math.max(waitUntil, Number(r.rows[0]?.at ?? now) + RATE_WINDOW_MS);
    }
    const tpm = p.limits.tokensPerMinute;
    if (tpm !== undefined && used + tokens > tpm) {
      const r = await tx.query<{ at: string }>(
        `SELECT at FROM (SELECT at, sum(tokens) OVER (ORDER BY at, grant_id) AS cum
            FROM ${t.rateGrants} WHERE key = $1) w
          WHERE cum >= $2 ORDER BY at LIMIT 1`,
        [p.key, used + tokens - tpm],
      );
      waitUntil = Math.max(waitUntil, Number(r.rows[0]?.at ?? now) + RATE_WINDOW_MS);
    }
    if (waitUntil > now) return { granted: false, waitMs: waitUntil - now };
    await tx.query(
      `INSERT INTO ${t.rateGrants} (key, grant_id, at, tokens) VALUES ($1, $2, $3, $4)`,
      [p.key, p.grantId, now, tokens],
    );
    return { granted: true };
  });
}

export async function settleRate(
  ctx: StoreContext,
  p: { key: string; grantId: string; tokens: number },
): Promise<void> {
  const { db, t } = ctx;
  await db.statement(
    "settleRate",
    "idempotent",
    `UPDATE ${t.rateGrants} SET tokens = $3 WHERE key = $1 AND grant_id = $2`,
    [p.key, p.grantId, grantTokens(p.tokens)],
  );
}

export async function blockRate(ctx: StoreContext, p: { key: string; forMs: number }) {
  const { db, t } = ctx;
  await db.statement(
    "blockRate",
    "idempotent",
    `INSERT INTO ${t.rateLimiters} (key, blocked_until)
      SELECT $2, c.now + $3 FROM (SELECT ${nowSql(1)} AS now) c
      ON CONFLICT (key) DO UPDATE
        SET blocked_until = greatest(${t.rateLimiters}.blocked_until, EXCLUDED.blocked_until)`,
    [ctx.clockParam(), p.key, blockMs(p.forMs)],
  );
}

export async function appendStream(
  ctx: StoreContext,
  p: { runId: string; chunks: string[] },
): Promise<AppendStreamOutcome> {
  const { db, t } = ctx;
  // The call's token, on its first chunk: a retry after a commit whose answer was lost finds
  // the chunks that try appended by it, rather than appending them a second time.
  const token = randomUUID();
  return db.transaction("appendStream", "own-write", async (tx) => {
    const run = await tx.query<{ finished: boolean }>(
      `SELECT status IN (${TERMINAL_STATUS_LIST}) AS finished FROM ${t.runs}
        WHERE id = $1 FOR SHARE`,
      [p.runId],
    );
    if (!run.rows[0]) return { ok: false, reason: "not-found" } as const;
    if (tx.mayHaveCommitted && p.chunks.length > 0) {
      const own = await tx.query<{ seq: string }>(
        `SELECT seq FROM ${t.runStreams} WHERE run_id = $1 AND append_token = $2`,
        [p.runId, token],
      );
      if (own.rows[0]) return { ok: true, offset: Number(own.rows[0].seq) } as const;
    }
    if (run.rows[0].finished) return { ok: false, reason: "finished" } as const;
    const head = await tx.query<{ first: string }>(
      `INSERT INTO ${t.runStreamHeads} AS h (run_id, next_offset) VALUES ($1, $2)
        ON CONFLICT (run_id) DO UPDATE SET next_offset = h.next_offset + $2
        RETURNING h.next_offset - $2 AS first`,
      [p.runId, p.chunks.length],
    );
    const first = Number(head.rows[0]?.first ?? 0);
    if (p.chunks.length > 0) {
      await tx.query(
        `INSERT INTO ${t.runStreams} (run_id, seq, data, created_at, append_token)
          SELECT $2, $3 + d.ord - 1, d.data, c.now, CASE WHEN d.ord = 1 THEN $5::text END
            FROM unnest($4::text[]) WITH ORDINALITY AS d(data, ord),
              (SELECT ${nowSql(1)} AS now) c`,
        [ctx.clockParam(), p.runId, first, p.chunks, token],
      );
    }
    return { ok: true, offset: first } as const;
  });
}

export async function readStream(
  ctx: StoreContext,
  p: { runId: string; from: number; limit?: number },
): Promise<StreamChunk[]> {
  const { db, t } = ctx;
  const r = await db.statement<{ seq: string; data: string; created_at: string }>(
    "readStream",
    "idempotent",
    `SELECT seq, data, created_at FROM ${t.runStreams}
      WHERE run_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3`,
    [p.runId, pageCount(p.from), pageCount(p.limit ?? 1_000)],
  );
  return r.rows.map((row) => ({
    offset: Number(row.seq),
    data: row.data,
    createdAt: Number(row.created_at),
  }));
}
