// The generative replay test's ledger: what really happened, outside cairn, in a SQLite file
// of its own that worker processes and the test share. Every step-body execution (start and
// end, with the input it saw), every effect perform and reconcile, every value a workflow
// execution received from a ctx call (in the order it received them), the race marks that
// gate losing branches, and the "fixes" that let a broken step succeed after a resume.
//
// Writes are synchronous (better-sqlite3), so a process SIGKILLed right after one keeps it.
// In-process crashes use `view(incarnation)`: once the incarnation is dead its writes are
// dropped, as a killed process writes nothing, and `onWrite` lets a harness crash an engine
// at the Nth write.

import Database from "better-sqlite3";

export interface Incarnation {
  /** 0-based number of the worker (process or in-process engine) that executes. */
  readonly no: number;
  dead: boolean;
}

export interface ExecRow {
  id: number;
  run: string;
  idem: string;
  instance: string;
  mode: string;
  attempt: number;
  inc: number;
  input: string;
  phase: "start" | "ok" | "fail";
}

export interface ObsRow {
  id: number;
  run: string;
  exec: string;
  n: number;
  instance: string;
  value: string;
  /** 1: received outside any cascade of a cairn hand-over (after a timer or I/O of the
   *  workflow's own: a race its synchronous winner settled); its place is timing. */
  late: number;
}

export interface EffectRow {
  id: number;
  run: string;
  idem: string;
  instance: string;
  input: string;
  inc: number;
  op: "perform" | "reconcile";
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS exec (id INTEGER PRIMARY KEY, run TEXT, idem TEXT, instance TEXT,
  mode TEXT, attempt INTEGER, inc INTEGER, input TEXT, phase TEXT);
CREATE TABLE IF NOT EXISTS fx (id INTEGER PRIMARY KEY, run TEXT, idem TEXT, instance TEXT,
  input TEXT, inc INTEGER, op TEXT);
CREATE TABLE IF NOT EXISTS fx_state (idem TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS obs (id INTEGER PRIMARY KEY, run TEXT, exec TEXT, n INTEGER,
  instance TEXT, value TEXT, late INTEGER);
CREATE TABLE IF NOT EXISTS marks (run TEXT, mark TEXT, PRIMARY KEY (run, mark));
CREATE TABLE IF NOT EXISTS fixes (run TEXT PRIMARY KEY, n INTEGER);
`;

export class Ledger {
  private readonly db: Database.Database;
  private readonly statements = new Map<string, Database.Statement>();
  /** Writes so far by this connection (every kind). */
  writes = 0;
  /** Called after each write with the count so far (crash triggers). */
  onWrite: ((count: number) => void) | undefined;

  constructor(readonly path: string) {
    this.db = new Database(path);
    this.db.pragma("journal_mode = WAL");
    this.db.pragma("synchronous = OFF");
    this.db.pragma("busy_timeout = 10000");
    this.db.exec(SCHEMA);
  }

  close(): void {
    this.db.close();
  }

  private q(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (!st) {
      st = this.db.prepare(sql);
      this.statements.set(sql, st);
    }
    return st;
  }

  private wrote(): void {
    this.writes++;
    this.onWrite?.(this.writes);
  }

  /** A view that drops every write once `inc` is dead. */
  view(inc: Incarnation): LedgerView {
    return new LedgerView(this, inc);
  }

  // ---- writes (through a view) ----

  exec(row: Omit<ExecRow, "id">): void {
    this.q(
      "INSERT INTO exec (run, idem, instance, mode, attempt, inc, input, phase) VALUES (?,?,?,?,?,?,?,?)",
    ).run(row.run, row.idem, row.instance, row.mode, row.attempt, row.inc, row.input, row.phase);
    this.wrote();
  }

  /** An effect's perform: the side effect itself, atomically with its log line. */
  perform(row: Omit<EffectRow, "id" | "op">, value: string): void {
    this.db.transaction(() => {
      this.q("INSERT INTO fx (run, idem, instance, input, inc, op) VALUES (?,?,?,?,?,?)").run(
        row.run,
        row.idem,
        row.instance,
        row.input,
        row.inc,
        "perform",
      );
      this.q("INSERT OR IGNORE INTO fx_state (idem, value) VALUES (?,?)").run(row.idem, value);
    })();
    this.wrote();
  }

  reconcile(row: Omit<EffectRow, "id" | "op">): string | undefined {
    this.q("INSERT INTO fx (run, idem, instance, input, inc, op) VALUES (?,?,?,?,?,?)").run(
      row.run,
      row.idem,
      row.instance,
      row.input,
      row.inc,
      "reconcile",
    );
    this.wrote();
    const r = this.q("SELECT value FROM fx_state WHERE idem = ?").get(row.idem) as
      | { value: string }
      | undefined;
    return r?.value;
  }

  observe(row: Omit<ObsRow, "id">): void {
    this.q("INSERT INTO obs (run, exec, n, instance, value, late) VALUES (?,?,?,?,?,?)").run(
      row.run,
      row.exec,
      row.n,
      row.instance,
      row.value,
      row.late,
    );
    this.wrote();
  }

  mark(run: string, mark: string): void {
    this.q("INSERT OR IGNORE INTO marks (run, mark) VALUES (?,?)").run(run, mark);
    this.wrote();
  }

  /** Lets broken steps of `run` up to index n-1 succeed from now on. */
  fix(run: string): number {
    this.q(
      "INSERT INTO fixes (run, n) VALUES (?, 1) ON CONFLICT (run) DO UPDATE SET n = n + 1",
    ).run(run);
    return this.fixes(run);
  }

  // ---- reads ----

  hasMark(run: string, mark: string): boolean {
    return !!this.q("SELECT 1 FROM marks WHERE run = ? AND mark = ?").get(run, mark);
  }

  fixes(run: string): number {
    const r = this.q("SELECT n FROM fixes WHERE run = ?").get(run) as { n: number } | undefined;
    return r?.n ?? 0;
  }

  startsOf(idem: string): number {
    const r = this.q("SELECT count(*) AS n FROM exec WHERE idem = ? AND phase = 'start'").get(
      idem,
    ) as { n: number };
    return r.n;
  }

  execRows(): ExecRow[] {
    return this.q("SELECT * FROM exec ORDER BY id").all() as ExecRow[];
  }

  effectRows(): EffectRow[] {
    return this.q("SELECT * FROM fx ORDER BY id").all() as EffectRow[];
  }

  obsRows(): ObsRow[] {
    return this.q("SELECT * FROM obs ORDER BY id").all() as ObsRow[];
  }

  /** Every ledger row's count (for crash points drawn from the reference run). */
  total(): number {
    const r = this.q(
      "SELECT (SELECT count(*) FROM exec) + (SELECT count(*) FROM fx) + (SELECT count(*) FROM obs) + (SELECT count(*) FROM marks) AS n",
    ).get() as { n: number };
    return r.n;
  }
}

/** The ledger as one incarnation sees it: writes are dropped once it is dead. */
export class LedgerView {
  constructor(
    readonly ledger: Ledger,
    readonly inc: Incarnation,
  ) {}

  get dead(): boolean {
    return this.inc.dead;
  }

  exec(row: Omit<ExecRow, "id" | "inc">): void {
    if (!this.inc.dead) this.ledger.exec({ ...row, inc: this.inc.no });
  }

  perform(row: Omit<EffectRow, "id" | "op" | "inc">, value: string): void {
    if (!this.inc.dead) this.ledger.perform({ ...row, inc: this.inc.no }, value);
  }

  reconcile(row: Omit<EffectRow, "id" | "op" | "inc">): string | undefined {
    if (this.inc.dead) return undefined;
    return this.ledger.reconcile({ ...row, inc: this.inc.no });
  }

  observe(row: Omit<ObsRow, "id">): void {
    if (!this.inc.dead) this.ledger.observe(row);
  }

  mark(run: string, mark: string): void {
    if (!this.inc.dead) this.ledger.mark(run, mark);
  }

  hasMark(run: string, mark: string): boolean {
    return this.ledger.hasMark(run, mark);
  }

  fixes(run: string): number {
    return this.ledger.fixes(run);
  }

  startsOf(idem: string): number {
    return this.ledger.startsOf(idem);
  }
}
