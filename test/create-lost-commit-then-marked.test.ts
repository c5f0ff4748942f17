// PostgreSQL: a create whose COMMIT went through but whose answer was lost, retried after
// another process marked the store encrypted. The retry's INSERT ... ON CONFLICT DO NOTHING
// fires the mark's BEFORE INSERT trigger on the row it proposes (PostgreSQL runs row BEFORE
// triggers before it looks for the conflict), so the plain input this very call committed
// before the mark is refused, and the call answered EncryptionKeyMissingError for a run that
// exists, made by it (its create token), which workers then execute: the caller is told its
// start failed, and a second start of the id is refused by the guard as well.

import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { type EncryptionKey, encryptedStore, type Store } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { NewRun } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { commitLosingPool } from "./helpers/commit-losing-pool.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";

const url = await postgresTestUrl();
const key: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

const newRun = (id: string, over: Partial<NewRun> = {}): NewRun => ({
  id,
  workflow: "wf",
  version: "1",
  input: '{"secret":1}',
  budgetLimit: {},
  ...over,
});

describe.skipIf(!url)("PostgreSQL: a lost create commit retried after the store was marked", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  /** A keyless store on a pool that loses a commit's answer (opened before the mark, on a
   *  clock that stands still: it never reads the mark again), and `mark()`: a keyed store
   *  of another process opens the schema, which marks it and installs the triggers. */
  async function stores() {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const losing = commitLosingPool(base);
    cleanups.push(() => losing.pool.end());
    const keyless = postgresStore(losing.pool, { schema: t.schema });
    await keyless.open({ clock: createVirtualClock() });
    cleanups.push(() => keyless.close());
    let keyed: Store | undefined;
    const mark = async () => {
      keyed = encryptedStore(postgresStore(base, { schema: t.schema }), { keys: [key] });
      await keyed.open({ clock: createVirtualClock() });
      cleanups.push(() => keyed!.close());
      expect(await keyed.isMarkedEncrypted?.()).toBe(true);
    };
    return { keyless, mark, keyed: () => keyed!, ...losing };
  }

  const isCreate = (sql: string) => sql.includes(".runs") && sql.startsWith("WITH x AS");

  it("a lone create: answered as made (created=true, the stored run), not refused", async () => {
    const { keyless, mark, keyed, loseAfter, lost } = await stores();
    loseAfter(isCreate, mark);
    const made = await keyless.createRun(newRun("run_lone"));
    expect(lost()).toBe(1);
    expect(made.created).toBe(true);
    expect(made.run.input).toBe('{"secret":1}');
    const stored = await keyed().getRun("run_lone");
    expect(stored?.status).toBe("pending");
    // The keyed store reads a plain input written before the mark as it is.
    expect(made.run).toEqual(stored);
  });

  it("a turn's creates: each answered as made, the plain one too", async () => {
    const { keyless, mark, loseAfter, lost } = await stores();
    loseAfter(isCreate, mark);
    const [plain, bare] = await Promise.allSettled([
      keyless.createRun(newRun("run_plain")),
      keyless.createRun(newRun("run_bare", { input: "-1" })),
    ]);
    expect(lost()).toBe(1);
    expect(plain).toMatchObject({ status: "fulfilled", value: { created: true } });
    expect(bare).toMatchObject({ status: "fulfilled", value: { created: true } });
  });

  it("still refused: a plain create of an id another call made (created=false is not its)", async () => {
    const { keyless, mark } = await stores();
    await keyless.createRun(newRun("run_taken"));
    await mark();
    // The keyless store still believes the store unmarked: the trigger refuses it.
    await expect(keyless.createRun(newRun("run_taken"))).rejects.toThrow(/marked encrypted|plain/);
  });
});
