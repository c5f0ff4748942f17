// A pg pool that loses a COMMIT's answer on demand: the server commits, the connection
// drops before the caller hears of it (the "commit outcome unknown" case of PostgreSQL).

import pg from "pg";

/**
 * A pool whose connection is dropped right after the server committed a transaction that
 * ran a statement `lose` picks, once; `between` runs after that commit and before the
 * caller hears of the drop (and so before its retry), as another process's work would.
 */
export function commitLosingPool(url: string) {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  let lose: ((sql: string) => boolean) | undefined;
  let between: (() => Promise<void>) | undefined;
  let lost = 0;
  let unreachable = false; // after the loss: the database cannot be reached again
  const patched = new WeakSet<object>();
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  (pool as unknown as { connect: () => Promise<pg.PoolClient> }).connect = async () => {
    if (unreachable)
      throw Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
    const c = await connect();
    if (patched.has(c)) return c;
    patched.add(c);
    const query = c.query.bind(c) as (sql: string, params?: unknown[]) => Promise<unknown>;
    const seen: string[] = [];
    (c as unknown as { query: unknown }).query = async (sql: string, params?: unknown[]) => {
      if (sql === "COMMIT") {
        const hit = lose !== undefined && seen.splice(0).some(lose);
        const out = await query(sql);
        if (!hit) return out;
        lose = undefined;
        lost++;
        const then = between;
        between = undefined;
        await then?.();
        (
          c as unknown as { connection: { stream: { destroy(): void } } }
        ).connection.stream.destroy();
        throw new Error("Connection terminated unexpectedly");
      }
      if (typeof sql === "string" && !sql.startsWith("BEGIN")) seen.push(sql);
      return query(sql, params);
    };
    return c;
  };
  return {
    pool,
    loseAfter(f: (sql: string) => boolean, then?: () => Promise<void>) {
      lose = f;
      between = then;
    },
    lost: () => lost,
    /** From the next loss on, every connect fails. */
    unreachableAfterLoss() {
      between = async () => {
        unreachable = true;
      };
    },
  };
}
