// The database's own refusal of plain payloads on a store marked encrypted (PostgreSQL).
//
// The guard (plain-payloads.ts) learns of a mark another process wrote by reading it, which
// a process believing "not marked" does in the background, about once a second: its first
// plain writes after the mark landed. The mark now installs, in its own transaction, a
// trigger on each payload-bearing table that refuses a row whose payload is plain text (the
// guard's rules: an envelope tells ciphertext, the text of undefined holds nothing, cairn's
// own cancel words and an approval answer's event without answer or comment hold no
// secret). CREATE TRIGGER locks each table against writes, so a write either committed
// before the mark or meets the trigger: no window is left. A store without the mark has no
// trigger and pays nothing; a store marked before this version gets them when an
// encryptedStore or a keyless store opens it. The trigger reads the mark again before it
// refuses (a trigger the mark's removal could not drop, or a schema emptied by DELETE, lets
// plain text through), and raises SQLSTATE CNPLN with the refused part as JSON in DETAIL,
// which connection.ts maps to the guard's own refusal (EncryptionKeyMissingError).
//
// "Written in this transaction" is told by a row's xmin, the transaction's own xid (the 32
// bits of txid_current: PostgreSQL's writes here take no savepoint).
//
// A fork copies the source's records as they are (perhaps plain, written before the mark):
// the runs trigger notes the run created in this transaction, whose copied records pass.
//
// The triggers' name says which build installed them: a generation, the oldest generation
// whose writers its guard lets pass, and a digest of what it installs (the functions' text,
// the tables and statements): cairn_plain_guard_g<generation>_w<writers>_<digest>. An open
// finds the names in the one catalog read it makes anyway (the mark's). A digest alone could
// not tell which of two builds is newer: during a rolling deploy each one's open replaced the
// other's triggers, every time. Now (guardWinner):
// - The newer generation wins: an open finding an older one's triggers (or a cairn's from
//   before generations, cairn_plain_guard_<digest> and cairn_plain_guard_1: generation 0)
//   replaces them, functions and triggers in one transaction (no moment without a trigger).
// - An open finding a newer generation's triggers whose guard lets this build's writers pass
//   leaves them, and their functions, in place. One whose guard would refuse them (its
//   writers' generation is above this build's) is replaced, and said (the newer build's next
//   open installs its own again: finish the deploy).
// - The same digest under another name (a cairn before generations that installs the same
//   rules) is taken as this build's own: left in place.
// - The same generation with another digest is a defect (a build made from changed sources
//   without raising GUARD_GENERATION): said, naming both; this build's replace them, as
//   before generations.
// The functions keep their names: the triggers that call them are the version's witness, and
// only the build whose triggers win writes them. An open of an unmarked store that finds
// triggers (left by a removal of the mark that could not lock a table in time) drops them,
// whatever their generation: they cost a read of the mark per row written.

import { createHash } from "node:crypto";
import { EncryptionKeyMissingError } from "../../errors.js";
import type { Tx } from "./connection.js";
import type { StoreContext } from "./sql.js";

/** The SQLSTATE the triggers raise (connection.ts maps it). */
export const PLAIN_REFUSED = "CNPLN";

/** Whether `err` is a plain payload refused (by the triggers, as connection.ts maps their
 *  error, or by the guard): the creates and releases of one turn that one statement sent are
 *  then sent again one by one (turn-batch.ts isolatingFailures), so that only the plain one
 *  fails. A process that opened the store before another marked it sends plain text until
 *  it reads the mark (about a second): a release with no payload (a suspension) grouped with
 *  its one plain completion failed with it. */
export function plainRefused(err: unknown): boolean {
  return err instanceof EncryptionKeyMissingError;
}

/** What the triggers' name begins with, in every version (the first was cairn_plain_guard_1). */
const GUARD_PREFIX = "cairn_plain_guard_";

/** The advisory lock that orders installs and removals: the first version's, so a cairn of
 *  that version is ordered with this one too. */
const LOCK_KEY = "cairn_plain_guard_1";

/** Tables and the statements each trigger fires on. */
const GUARDED: ReadonlyArray<[table: string, fn: string, on: string]> = [
  ["runs", "cairn_plain_runs", "INSERT OR UPDATE"],
  ["steps", "cairn_plain_steps", "INSERT OR UPDATE OF result, error"],
  ["attempts", "cairn_plain_attempts", "INSERT OR UPDATE OF error"],
  ["intents", "cairn_plain_intents", "INSERT OR UPDATE OF data"],
  ["events", "cairn_plain_events", "INSERT OR UPDATE OF payload"],
  ["run_streams", "cairn_plain_streams", "INSERT OR UPDATE OF data"],
  ["workspace_objects", "cairn_plain_objects", "INSERT OR UPDATE OF data"],
  ["approvals", "cairn_plain_approvals", "INSERT OR UPDATE OF request, answer, comment"],
];

/** One table's trigger, named `name`, in schema `q`. */
const triggerSql = (q: string, name: string, [table, fn, on]: (typeof GUARDED)[number]) =>
  `CREATE TRIGGER ${name} BEFORE ${on} ON ${q}.${table}
    FOR EACH ROW EXECUTE FUNCTION ${q}.${fn}()`;

/** The generation of what this build installs: raise it whenever functions() or GUARDED
 *  change (the digest does; test/plain-trigger-generations.test.ts pins the digest of
 *  each generation), so a rolling deploy's older build leaves the newer one's triggers in
 *  place. Generation 0: every cairn before generations. */
export const GUARD_GENERATION = 1;

/** The oldest generation whose writers this build's guard lets pass (everything they write
 *  that their own guard let pass). Raised only by a guard that refuses more than before:
 *  an older build finding it then replaces it (its writes would be refused), until the
 *  deploy ends. */
const GUARD_WRITERS_FROM = 0;

/** What a build installs, as its triggers' name tells it. */
export interface GuardBuild {
  generation: number;
  /** The oldest generation whose writers its guard lets pass. */
  writersFrom: number;
  /** 12 hex digits of what it installs; undefined for cairn_plain_guard_1 (it kept none). */
  digest: string | undefined;
}

/** This build's: what it installs. */
export const THIS_BUILD: GuardBuild = {
  generation: GUARD_GENERATION,
  writersFrom: GUARD_WRITERS_FROM,
  digest: createHash("sha256")
    .update(JSON.stringify([functions('"s"'), GUARDED.map((g) => triggerSql('"s"', "t", g))]))
    .digest("hex")
    .slice(0, 12),
};

/** The triggers' name of a build. */
export function guardName(b: GuardBuild): string {
  return `${GUARD_PREFIX}g${b.generation}_w${b.writersFrom}_${b.digest ?? "none"}`;
}

/** This build's triggers' name. */
export const TRIGGER = guardName(THIS_BUILD);

const NAMED = /^cairn_plain_guard_g(\d{1,9})_w(\d{1,9})_([0-9a-f]{12})$/;
const BEFORE_GENERATIONS = /^cairn_plain_guard_([0-9a-f]{12})$/;

/** The build a trigger's name tells (GUARD_PREFIX and anything else: generation 0). */
export function builtBy(name: string): GuardBuild {
  const named = NAMED.exec(name);
  if (named) {
    return { generation: Number(named[1]), writersFrom: Number(named[2]), digest: named[3] };
  }
  return { generation: 0, writersFrom: 0, digest: BEFORE_GENERATIONS.exec(name)?.[1] };
}

/** Which triggers a marked store is to hold, as `build` judges the names found on it: `name`
 *  (its own; the same digest under another name; or a newer generation's whose guard lets
 *  its writers pass, `ours` false: left to that build), and what to say of the names found
 *  (a defect, or a newer build that refuses this one's writes). */
export function guardWinner(
  found: readonly string[],
  build: GuardBuild = THIS_BUILD,
): { name: string; ours: boolean; said: string[] } {
  const own = guardName(build);
  const names = [...new Set(found)];
  const builds = names.map((name) => ({ name, ...builtBy(name) }));
  const newer = builds
    .filter((b) => b.generation > build.generation && b.writersFrom <= build.generation)
    .sort((a, b) => b.generation - a.generation || (a.name < b.name ? 1 : -1))[0];
  if (newer !== undefined) return { name: newer.name, ours: false, said: [] };
  const said: string[] = [];
  for (const b of builds) {
    if (b.name === own || b.digest === build.digest) continue;
    if (b.generation === build.generation) {
      said.push(
        `held the plain-payload triggers ${b.name}, of this build's generation ` +
          `${build.generation} but not its rules (this build's: ${own}). Two builds that ` +
          "install different rules under one generation cannot tell which is newer, and " +
          "each one's open replaces the other's; one of them was built from changed sources " +
          "without raising GUARD_GENERATION (src/store/postgres/plain-triggers.ts): run one " +
          "cairn release, or raise it. This open installed its own",
      );
    } else if (b.generation > build.generation) {
      said.push(
        `held the plain-payload triggers ${b.name} of a newer cairn (generation ` +
          `${b.generation}), whose guard refuses writes of this build's generation ` +
          `${build.generation} (it lets writers of generation ${b.writersFrom} on pass): this ` +
          `open replaced them with its own (${own}), and the newer build's next open installs ` +
          "its own again. Finish the deploy: stop the processes of this build",
      );
    }
  }
  const same = names.includes(own) ? own : builds.find((b) => b.digest === build.digest)?.name;
  return { name: same ?? own, ours: true, said };
}

const schemaOf = (ctx: StoreContext): string => ctx.t.runs.slice(0, -".runs".length);

/** The functions (CREATE OR REPLACE) the triggers call, in schema `q`. */
function functions(q: string): string[] {
  // Text an encryptedStore wrote begins "cairn:enc:" in a version other than 0; "-1" is
  // the text of undefined (plain-payloads.ts: isCiphertext, NOTHING).
  const plain = `CREATE OR REPLACE FUNCTION ${q}.cairn_plain(t text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $f$
      SELECT t IS NOT NULL AND t <> '-1'
        AND NOT (substr(t, 1, 10) = 'cairn:enc:' AND substr(t, 1, 12) <> 'cairn:enc:0:')
    $f$`;
  // An error record's text (error-json.ts): [name, message, code, stack]. A string element
  // is read as written (json, not jsonb: the quotes and escapes kept); the envelope's
  // letters are never escaped. Its \u escapes are made \u0001 first: the json type refuses
  // a lone surrogate's (22P02) and its -> a NUL's (22P05), in any element (an error's name,
  // which stays plain, holding one failed every write of the error on a marked store), and
  // none of them is in the text the rules look at (a prefix, or "-1").
  const plainError = `CREATE OR REPLACE FUNCTION ${q}.cairn_plain_error(e text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $f$
    DECLARE
      j json;
      part json;
    BEGIN
      IF e IS NULL THEN RETURN false; END IF;
      j := CASE WHEN strpos(e, '\\u') = 0 THEN e
        ELSE regexp_replace(e, '\\\\u[0-9a-fA-F]{4}', '\\\\u0001', 'g') END;
      FOREACH part IN ARRAY ARRAY[j -> 1, j -> 3] LOOP
        IF part IS NOT NULL AND json_typeof(part) = 'string'
          AND ${q}.cairn_plain(substr(part::text, 2, length(part::text) - 2)) THEN
          RETURN true;
        END IF;
      END LOOP;
      RETURN false;
    END $f$`;
  // cancel-texts.ts's isCairnCancelReason: the default reason, or a cascade's wrapping of
  // it, each id the parent of the run before it (the first: the run's own, given).
  const cancelWords = `CREATE OR REPLACE FUNCTION ${q}.cairn_cancel_words(run text, parent text, reason text)
    RETURNS boolean LANGUAGE plpgsql STABLE AS $f$
    DECLARE
      head constant text := 'its parent run "';
      sep constant text := '" was canceled: ';
      r text := reason;
      expected text := parent;
      pid text;
      tail int;
    BEGIN
      IF r IS NULL THEN RETURN false; END IF;
      WHILE starts_with(r, head) LOOP
        tail := strpos(substr(r, length(head) + 1), sep);
        IF tail = 0 THEN RETURN false; END IF;
        pid := substr(r, length(head) + 1, tail - 1);
        IF expected IS DISTINCT FROM pid THEN RETURN false; END IF;
        expected := (SELECT parent_id FROM ${q}.runs WHERE id = pid);
        r := substr(r, length(head) + tail + length(sep));
      END LOOP;
      RETURN r = 'canceled by request';
    END $f$`;
  // Raises, unless the store is no longer marked.
  const refuse = `CREATE OR REPLACE FUNCTION ${q}.cairn_refuse_plain(what text, run text, key text)
    RETURNS void LANGUAGE plpgsql AS $f$
    BEGIN
      IF NOT EXISTS (SELECT 1 FROM ${q}.store_marks WHERE name = 'encrypted') THEN RETURN; END IF;
      RAISE EXCEPTION 'the store is marked encrypted: % would be stored in plain text', what
        USING ERRCODE = '${PLAIN_REFUSED}',
          DETAIL = json_build_object('what', what, 'runId', run, 'key', key)::text;
    END $f$`;
  // A record a fork copies, in the transaction that created its run.
  const copied = `CREATE OR REPLACE FUNCTION ${q}.cairn_plain_copied(run text) RETURNS boolean
    LANGUAGE sql STABLE AS $f$
      SELECT coalesce(current_setting('cairn.created_run', true) = run, false)
    $f$`;
  const trigger = (name: string, body: string) =>
    `CREATE OR REPLACE FUNCTION ${q}.${name}() RETURNS trigger LANGUAGE plpgsql AS $f$
    DECLARE
      what text;
      ins constant boolean := TG_OP = 'INSERT';
    BEGIN
${body}
      RETURN NEW;
    END $f$`;
  // A column written by this statement: inserted, or changed by an update (a row written
  // before the mark is not refused for a column the update leaves as it was). Asked after
  // the column is found plain, never before: comparing a value with OLD's reads both whole
  // (a TOASTed 1 MB input read twice on each claim, renewal and release of its run: 960 us
  // of server CPU per run renewed, against 135 without the triggers), where cairn_plain
  // reads a value's first 12 characters only (substr of a TOASTed value fetches a slice).
  const set = (col: string) => `(ins OR NEW.${col} IS DISTINCT FROM OLD.${col})`;
  const runs = trigger(
    "cairn_plain_runs",
    `      IF ins THEN PERFORM set_config('cairn.created_run', NEW.id, true); END IF;
      IF ${q}.cairn_plain(NEW.input) AND ${set("input")} THEN
        what := format('the input of run "%s"', NEW.id);
      ELSIF ${q}.cairn_plain(NEW.handed_input_digest) AND ${set("handed_input_digest")} THEN
        what := format('the handed-input digest of run "%s"', NEW.id);
      ELSIF ${q}.cairn_plain(NEW.output) AND ${set("output")} THEN
        what := format('the output of run "%s"', NEW.id);
      ELSIF NEW.error IS NOT NULL AND ${set("error")} AND ${q}.cairn_plain_error(NEW.error) THEN
        what := format('the error of run "%s"', NEW.id);
      ELSIF ${q}.cairn_plain(NEW.reason) AND ${set("reason")}
        AND (NEW.status IN ('failed', 'canceled') OR NEW.cancel_requested)
        AND NOT ${q}.cairn_cancel_words(NEW.id, NEW.parent_id, NEW.reason) THEN
        what := format(CASE WHEN NEW.status = 'failed' THEN 'the reason of run "%s"'
          ELSE 'the cancel reason of run "%s"' END, NEW.id);
      END IF;
      IF what IS NOT NULL THEN PERFORM ${q}.cairn_refuse_plain(what, NEW.id, NULL); END IF;`,
  );
  const steps = trigger(
    "cairn_plain_steps",
    `      IF ${q}.cairn_plain_copied(NEW.run_id) THEN RETURN NEW; END IF;
      IF ${q}.cairn_plain(NEW.result) AND ${set("result")} THEN
        what := format('the result of step "%s" of run "%s"', NEW.key, NEW.run_id);
      ELSIF NEW.error IS NOT NULL AND ${set("error")} AND ${q}.cairn_plain_error(NEW.error) THEN
        what := format('the error of step "%s" of run "%s"', NEW.key, NEW.run_id);
      END IF;
      IF what IS NOT NULL THEN PERFORM ${q}.cairn_refuse_plain(what, NEW.run_id, NEW.key); END IF;`,
  );
  const attempts = trigger(
    "cairn_plain_attempts",
    `      IF ${q}.cairn_plain_copied(NEW.run_id) THEN RETURN NEW; END IF;
      IF NEW.error IS NOT NULL AND ${set("error")} AND ${q}.cairn_plain_error(NEW.error) THEN
        PERFORM ${q}.cairn_refuse_plain(format('the error of attempt %s of step "%s" of run "%s"',
          NEW.attempt, NEW.key, NEW.run_id), NEW.run_id, NEW.key);
      END IF;`,
  );
  const intents = trigger(
    "cairn_plain_intents",
    `      IF ${q}.cairn_plain_copied(NEW.run_id) THEN RETURN NEW; END IF;
      IF ${q}.cairn_plain(NEW.data) AND ${set("data")} THEN
        PERFORM ${q}.cairn_refuse_plain(format('the intent of "%s" of run "%s"', NEW.key, NEW.run_id),
          NEW.run_id, NEW.key);
      END IF;`,
  );
  // Plain but let through: the child-result event of a child canceled in cairn's words in
  // this transaction (cancel-texts.ts, canceledChildEvent), and the event of an approval
  // answered in this transaction without answer or comment (plainInApprovalAnswer).
  const events = trigger(
    "cairn_plain_events",
    `      IF NOT (${q}.cairn_plain(NEW.payload) AND ${set("payload")}) THEN RETURN NEW; END IF;
      IF starts_with(NEW.name, 'cairn.child:')
        AND ${q}.cairn_canceled_child_event(NEW.run_id, substr(NEW.name, 13), NEW.payload) THEN
        RETURN NEW;
      END IF;
      IF starts_with(NEW.name, 'cairn.approval:') AND EXISTS (
          SELECT 1 FROM ${q}.approvals a
            WHERE a.run_id = NEW.run_id AND a.key = substr(NEW.name, 16)
              AND a.xmin::text = (txid_current() % 4294967296)::text AND a.answer IS NULL AND a.comment IS NULL) THEN
        RETURN NEW;
      END IF;
      PERFORM ${q}.cairn_refuse_plain(format('the payload of event "%s" for run "%s"', NEW.name,
        NEW.run_id), NEW.run_id, NULL);`,
  );
  const canceledChildEvent = `CREATE OR REPLACE FUNCTION ${q}.cairn_canceled_child_event(parent text, child text, payload text)
    RETURNS boolean LANGUAGE plpgsql STABLE AS $f$
    DECLARE
      c record;
      v jsonb;
    BEGIN
      SELECT id, parent_id, reason INTO c FROM ${q}.runs
        WHERE id = child AND parent_id = parent AND status = 'canceled'
          AND xmin::text = (txid_current() % 4294967296)::text;
      IF NOT FOUND OR NOT coalesce(${q}.cairn_cancel_words(c.id, c.parent_id, c.reason), false) THEN
        RETURN false;
      END IF;
      BEGIN
        v := payload::jsonb;
      EXCEPTION WHEN others THEN
        RETURN false;
      END;
      RETURN v = jsonb_build_array(jsonb_build_object('error', 1),
        jsonb_build_object('name', 2, 'code', 3, 'message', 4), 'RunCanceledError', 'RUN_CANCELED',
        format('Run "%s" was canceled: %s', c.id, c.reason));
    END $f$`;
  const streams = trigger(
    "cairn_plain_streams",
    `      IF ${q}.cairn_plain(NEW.data) AND ${set("data")} THEN
        PERFORM ${q}.cairn_refuse_plain(format('a stream chunk of run "%s"', NEW.run_id), NEW.run_id, NULL);
      END IF;`,
  );
  // codec/encryption.ts's bytes envelope: the bytes of "CAIRNENC1" first.
  const objects = trigger(
    "cairn_plain_objects",
    `      IF NEW.data IS NOT NULL
        AND substring(NEW.data FROM 1 FOR 9) <> convert_to('CAIRNENC1', 'LATIN1') AND ${set("data")} THEN
        PERFORM ${q}.cairn_refuse_plain(format('workspace object %s', NEW.hash), NULL, NULL);
      END IF;`,
  );
  const approvals = trigger(
    "cairn_plain_approvals",
    `      IF ${q}.cairn_plain_copied(NEW.run_id) THEN RETURN NEW; END IF;
      IF ${q}.cairn_plain(NEW.request) AND ${set("request")} THEN
        what := format('the request of approval "%s" of run "%s"', NEW.key, NEW.run_id);
      ELSIF ${q}.cairn_plain(NEW.answer) AND ${set("answer")} THEN
        what := format('the answer of approval "%s" of run "%s"', NEW.key, NEW.run_id);
      ELSIF ${q}.cairn_plain(NEW.comment) AND ${set("comment")} THEN
        what := format('the comment of approval "%s" of run "%s"', NEW.key, NEW.run_id);
      END IF;
      IF what IS NOT NULL THEN PERFORM ${q}.cairn_refuse_plain(what, NEW.run_id, NEW.key); END IF;`,
  );
  return [
    plain,
    plainError,
    cancelWords,
    refuse,
    copied,
    canceledChildEvent,
    runs,
    steps,
    attempts,
    intents,
    events,
    streams,
    objects,
    approvals,
  ];
}

/** The names of the mark's triggers (of any version) on the runs table: one catalog read, by
 *  pg_trigger's index. guardState tells what they say. */
export function guardTriggersSql(ctx: StoreContext): string {
  return `array(SELECT tgname::text FROM pg_trigger
    WHERE tgrelid = '${schemaOf(ctx)}.runs'::regclass AND starts_with(tgname::text, '${GUARD_PREFIX}'))`;
}

/** "current": the triggers this build keeps alone (guardWinner: its own, or a newer
 *  generation's it leaves in place); "none"; "other": another version's (perhaps beside
 *  them). The install puts all eight tables in one state at once, so the runs table tells. */
export type GuardState = "current" | "none" | "other";

export function guardState(
  names: readonly string[] | null | undefined,
  build: GuardBuild = THIS_BUILD,
): GuardState {
  if (!names || names.length === 0) return "none";
  return names.length === 1 && guardWinner(names, build).name === names[0] ? "current" : "other";
}

/** The functions' names (functions() creates them, in this order). */
const FUNCTION_NAMES = functions('"s"').map((sql) => /FUNCTION "s"\.(\w+)\(/.exec(sql)![1]!);

/** Hands the functions to the tables' owner, where this role may (a member of that role,
 *  which may create in the schema): CREATE FUNCTION made this role their owner, and CREATE OR
 *  REPLACE FUNCTION wants the owner. A writer given the owner's rights (the grant
 *  CAIRN_PLAIN_TRIGGERS_REFUSED advises) installed them as its own, and the next build's
 *  open by the owner, or by another such writer, was refused (42501) and told to open the
 *  store as the owner it was: the earlier build's functions and triggers stayed. Never fails
 *  the install: a change of owner refused leaves them this role's. */
function toTablesOwner(q: string): string {
  return `DO $d$
    DECLARE f record;
    BEGIN
      FOR f IN SELECT p.oid::regprocedure AS fn, pg_get_userbyid(c.relowner) AS owner
          FROM pg_class c JOIN pg_proc p ON p.pronamespace = c.relnamespace
          WHERE c.oid = '${q}.runs'::regclass
            AND p.proname = ANY (ARRAY[${FUNCTION_NAMES.map((n) => `'${n}'`).join(", ")}])
            AND p.proowner <> c.relowner AND pg_has_role(c.relowner, 'MEMBER')
            AND has_schema_privilege(c.relowner, c.relnamespace, 'CREATE') LOOP
        BEGIN
          EXECUTE format('ALTER FUNCTION %s OWNER TO %I', f.fn, f.owner);
        EXCEPTION WHEN insufficient_privilege THEN
          NULL; -- a membership without SET (PostgreSQL 16): they stay this role's, as before
        END;
      END LOOP;
    END $d$`;
}

/** How long the install waits for one table's lock before it gives the tables back. */
export const INSTALL_LOCK_TIMEOUT_MS = 250;

/** The tables whose lock an install could not have (a lock not had in time, a deadlock), the
 *  latest first: the next try of the same mark locks them first. A writer that holds one of
 *  them and then writes runs (append_records: steps, then the run's budget) no longer finds
 *  the install holding runs while it waits for that table: the install waits holding none
 *  of the tables, and takes the others once it has it. */
export type LockOrder = string[];

const quoteIdent = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/** What was said, per store and name found: once per process (two builds that replace each
 *  other's triggers would otherwise say it at every open). */
const saidOnce = new Set<string>();

function say(ctx: StoreContext, what: string): void {
  const key = `${ctx.description}\n${what}`;
  if (saidOnce.has(key)) return;
  saidOnce.add(key);
  process.emitWarning(`cairn: the PostgreSQL store (${ctx.description}) ${what}.`, {
    code: "CAIRN_PLAIN_TRIGGERS_GENERATION",
  });
}

/** Makes the mark's triggers agree with the mark, inside `tx` (the mark's transaction, its
 *  removal's, or an open's): on a marked store this build's eight and no other, on an
 *  unmarked one none. Functions and triggers change in this one transaction: a write either
 *  committed before it or meets the triggers it leaves. An advisory lock orders it with
 *  another process's; `order` (kept across tries) says which tables to lock first. */
export async function syncPlainTriggers(
  ctx: StoreContext,
  tx: Tx,
  order: LockOrder = [],
): Promise<void> {
  const build = ctx.guardBuild ?? THIS_BUILD;
  const q = schemaOf(ctx);
  // CREATE TRIGGER takes SHARE ROW EXCLUSIVE on each table, DROP TRIGGER ACCESS EXCLUSIVE,
  // one after another: while it waits for a table a long transaction writes, every writer
  // (and, for a drop, reader) of the tables it already holds waits behind it. A lock not
  // had within INSTALL_LOCK_TIMEOUT fails the transaction (55P03), which lets them go;
  // markEncrypted tries again.
  await tx.query(`SET LOCAL lock_timeout = '${INSTALL_LOCK_TIMEOUT_MS}ms'`);
  await tx.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`${q}.${LOCK_KEY}`]);
  const now = await tx.query<{ marked: boolean; triggers: Array<[string, string]> }>(
    `SELECT EXISTS (SELECT 1 FROM ${ctx.t.storeMarks} WHERE name = 'encrypted') AS marked,
      coalesce((SELECT json_agg(json_build_array(c.relname, t.tgname))
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE t.tgrelid = ANY ($1::text[]::regclass[])
          AND starts_with(t.tgname::text, '${GUARD_PREFIX}')), '[]') AS triggers`,
    [GUARDED.map(([table]) => `${q}.${table}`)],
  );
  const marked = now.rows[0]?.marked === true;
  const found = now.rows[0]?.triggers ?? [];
  let keep: string | undefined;
  if (marked) {
    const winner = guardWinner(
      found.map(([, name]) => name),
      build,
    );
    for (const said of winner.said) say(ctx, said);
    // A newer build's, which lets this build's writers pass: its to keep, and to mend.
    if (!winner.ours) return;
    keep = winner.name;
  }
  const work: Array<{ table: string; drop: string[]; create: string | undefined }> = [];
  for (const guarded of GUARDED) {
    const [table] = guarded;
    const names = found.filter(([t]) => t === table).map(([, name]) => name);
    const drop = names.filter((name) => name !== keep);
    const create =
      keep !== undefined && !names.includes(keep) ? triggerSql(q, keep, guarded) : undefined;
    if (drop.length > 0 || create !== undefined) work.push({ table, drop, create });
  }
  if (work.length === 0) return;
  // The functions first (they lock no table): a role that may not create them is refused
  // before it holds any table. A trigger of another version beside this one's means a
  // cairn of that version replaced them (they are shared by name): written anew too.
  if (marked) {
    for (const sql of functions(q)) await tx.query(sql);
    await tx.query(toTablesOwner(q));
  }
  const rank = (table: string) => {
    const i = order.indexOf(table);
    return i === -1 ? order.length : i;
  };
  work.sort((a, b) => rank(a.table) - rank(b.table));
  for (const { table, drop, create } of work) {
    try {
      for (const name of drop) {
        await tx.query(`DROP TRIGGER IF EXISTS ${quoteIdent(name)} ON ${q}.${table}`);
      }
      if (create !== undefined) await tx.query(create);
    } catch (err) {
      order.splice(0, order.length, table, ...order.filter((t) => t !== table));
      throw err;
    }
  }
}
