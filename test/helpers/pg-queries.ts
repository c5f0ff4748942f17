// What the PostgreSQL tests that count a store's queries share: a store of its own (a fresh
// schema, opened, closed and dropped after the test) and the queries every pg client of this
// process sends while a body runs (counted on the client, not timed).

import pg from "pg";
import { realClock } from "../../src/lib/clock.js";
import { postgresStore } from "../../src/store/postgres/postgres-store.js";
import type { Store } from "../../src/store/store.js";
import { testSchema } from "./postgres.js";

/** One query as sent: its name (a prepared statement's) or undefined, its text, values. */
export interface SentQuery {
  name: string | undefined;
  text: string;
  values: unknown[];
}

/** A store on `url` in a fresh schema, opened; its close and the schema's drop are pushed
 *  onto `cleanups` (run last first). */
export async function openedPgStore(
  url: string,
  cleanups: Array<() => Promise<unknown>>,
  options: { poolSize?: number } = {},
): Promise<Store> {
  const t = testSchema(url);
  cleanups.push(t.drop);
  const store = postgresStore(url, { schema: t.schema, ...options });
  await store.open({ clock: realClock });
  cleanups.push(() => store.close());
  return store;
}

/** The queries every pg client of this process sends while `body` runs, in order. */
export async function queriesSentDuring(body: () => Promise<void>): Promise<SentQuery[]> {
  const proto = pg.Client.prototype as unknown as { query: (...a: unknown[]) => unknown };
  const real = proto.query;
  const sent: SentQuery[] = [];
  proto.query = function (this: unknown, ...a: unknown[]) {
    const q = a[0] as { name?: string; text?: string; values?: unknown[] } | string;
    sent.push(
      typeof q === "string"
        ? { name: undefined, text: q, values: (a[1] as unknown[] | undefined) ?? [] }
        : { name: q.name, text: q.text ?? "", values: q.values ?? [] },
    );
    return real.apply(this, a);
  };
  try {
    await body();
  } finally {
    proto.query = real;
  }
  return sent;
}
