// The store contract for inspection's paged reads (readJournalPage, readEvents): part of
// describeStoreContract (store-contract.ts). Pages must add up to exactly what the whole
// reads (loadJournal, listEvents) return, with no gap and no repeat, also while the run
// appends between pages.

import { describe, expect, it } from "vitest";
import type {
  AttemptRecord,
  IntentRecord,
  JournalPage,
  RunRecord,
  StepRecord,
  Store,
} from "../store/store.js";

/** What the main suite shares with this part (getters: the store is new in every test). */
export interface PageContractHelpers {
  store(): Store;
  /** A created and claimed run. */
  started(): Promise<RunRecord>;
  step(runId: string, key: string, seq: number, over?: Partial<StepRecord>): StepRecord;
  attempt(runId: string, key: string, n: number, over?: Partial<AttemptRecord>): AttemptRecord;
  intent(runId: string, key: string, over?: Partial<IntentRecord>): IntentRecord;
}

export function describePageContract(h: PageContractHelpers): void {
  async function append(
    run: RunRecord,
    records: { steps?: StepRecord[]; attempts?: AttemptRecord[]; intents?: IntentRecord[] },
  ) {
    expect(
      await h.store().appendRecords([{ runId: run.id, epoch: run.epoch, ...records }]),
    ).toEqual([{ ok: true }]);
  }

  /** Every page from `from` on, following `more` (bounded: a store that never ends fails). */
  async function allPages(runId: string, limit: number, from = 0): Promise<JournalPage[]> {
    const pages: JournalPage[] = [];
    for (let at: number | undefined = from; at !== undefined; ) {
      if (pages.length > 100) throw new Error(`readJournalPage of "${runId}" never ends`);
      const page = await h.store().readJournalPage({ runId, from: at, limit });
      pages.push(page);
      at = page.more ? page.steps[page.steps.length - 1]!.seq + 1 : undefined;
    }
    return pages;
  }

  const keysOf = (records: Array<{ key: string }>) => records.map((r) => r.key);
  const attemptIds = (records: AttemptRecord[]) =>
    records.map((a) => `${a.key}/${a.generation}/${a.attempt}`).sort();

  describe("readJournalPage", () => {
    it("pages each call's latest outcome in call order, with its attempts and intents, and the calls not completed last", async () => {
      const store = h.store();
      const run = await h.started();
      // A call failed in generation 0 and completed in generation 1 (later in call order);
      // two calls share seq 4 (one from each generation); one call has failed attempts,
      // one an intent; "retrying" and "sleeping" are begun but not completed.
      await append(run, {
        steps: [
          h.step(run.id, "a", 0),
          h.step(run.id, "b", 1),
          h.step(run.id, "flaky", 2),
          h.step(run.id, "redo", 3, {
            outcome: "error",
            result: null,
            error: { name: "Error", message: "failed" },
          }),
          h.step(run.id, "handler", 4),
          h.step(run.id, "effect", 5, { kind: "effect" }),
          h.step(run.id, "after", 6),
        ],
        attempts: [h.attempt(run.id, "flaky", 1), h.attempt(run.id, "retrying", 1)],
        intents: [h.intent(run.id, "effect"), h.intent(run.id, "sleeping", { kind: "sleep" })],
      });
      await append(run, {
        steps: [
          h.step(run.id, "redo", 3, { generation: 1 }),
          h.step(run.id, "instead", 4, { generation: 1 }),
        ],
      });
      const whole = await store.loadJournal(run.id);
      const latest = ["a", "b", "flaky", "redo", "handler", "instead", "effect", "after"];

      for (let limit = 1; limit <= 10; limit++) {
        const pages = await allPages(run.id, limit);
        const steps = pages.flatMap((p) => p.steps);
        expect(keysOf(steps), `limit ${limit}`).toEqual(latest);
        expect(steps.find((s) => s.key === "redo")?.generation).toBe(1);
        for (const [i, page] of pages.entries()) {
          expect(page.more, `limit ${limit}`).toBe(i < pages.length - 1);
          // A page never splits the calls of one seq, and holds at most `limit` calls but
          // for a group larger than the page.
          const next = pages[i + 1]?.steps[0];
          if (next) expect(page.steps[page.steps.length - 1]!.seq).toBeLessThan(next.seq);
          const seqs = new Set(page.steps.map((s) => s.seq));
          if (page.steps.length > limit) expect(seqs.size).toBe(1);
        }
        // Attempts and intents: each exactly once, on the page of its call, those of the
        // calls not completed on the last page.
        const attempts = pages.flatMap((p) => p.attempts);
        expect(attemptIds(attempts)).toEqual(attemptIds(whole.attempts));
        expect(keysOf(pages.flatMap((p) => p.intents)).sort()).toEqual(
          keysOf(whole.intents).sort(),
        );
        for (const page of pages.slice(0, -1)) {
          const onPage = new Set(keysOf(page.steps));
          for (const r of [...page.attempts, ...page.intents]) expect(onPage.has(r.key)).toBe(true);
        }
        expect(keysOf(pages[pages.length - 1]!.attempts)).toContain("retrying");
        expect(keysOf(pages[pages.length - 1]!.intents)).toContain("sleeping");
      }

      // The records are the stored ones, as the whole read returns them.
      const [one] = await allPages(run.id, 100);
      expect(one!.steps.find((s) => s.key === "effect")).toEqual(
        whole.steps.find((s) => s.key === "effect"),
      );
      expect(one!.intents.find((i) => i.key === "sleeping")).toEqual(
        whole.intents.find((i) => i.key === "sleeping"),
      );
      // A page from a position inside the run starts there.
      expect(
        keysOf((await store.readJournalPage({ runId: run.id, from: 4, limit: 2 })).steps),
      ).toEqual(["handler", "instead"]);
      // Past the last call: no steps, the calls not completed.
      const past = await store.readJournalPage({ runId: run.id, from: 99, limit: 5 });
      expect(past.steps).toEqual([]);
      expect(past.more).toBe(false);
      expect(keysOf(past.intents)).toEqual(["sleeping"]);
      expect(await store.readJournalPage({ runId: "run_nope", from: 0, limit: 5 })).toEqual({
        steps: [],
        attempts: [],
        intents: [],
        more: false,
      });
    });

    it("pages a run that appends between pages with no gap and no repeat", async () => {
      const run = await h.started();
      const seen: string[] = [];
      let next = 0;
      let written = 0;
      for (let round = 0; round < 12; round++) {
        // Three calls recorded, the next begun (its intent), between two page reads.
        const steps = [0, 1, 2].map((i) => h.step(run.id, `s${written + i}`, written + i));
        await append(run, {
          steps,
          intents: [h.intent(run.id, `s${written + 3}`, { kind: "sleep" })],
        });
        written += 3;
        const page = await h.store().readJournalPage({ runId: run.id, from: next, limit: 2 });
        seen.push(...keysOf(page.steps));
        if (page.more) next = page.steps[page.steps.length - 1]!.seq + 1;
        else next = written;
      }
      for (const page of await allPages(run.id, 2, next)) seen.push(...keysOf(page.steps));
      expect(seen).toEqual(Array.from({ length: written }, (_, i) => `s${i}`));
    });

    it("refuses a position or limit that is not a whole number, naming the run", async () => {
      const store = h.store();
      for (const [from, limit] of [
        [-1, 5],
        [1.5, 5],
        [0, 0],
        [0, Number.NaN],
      ] as const) {
        await expect(store.readJournalPage({ runId: "run_x", from, limit })).rejects.toThrow(
          /readJournalPage\(\): "(from|limit)" must be a whole number .*run "run_x"/,
        );
      }
    });
  });

  describe("readEvents", () => {
    it("pages a run's events after a seq, in the order sent, exactly as listEvents has them", async () => {
      const store = h.store();
      const run = await h.started();
      const other = await h.started();
      for (let i = 0; i < 7; i++) {
        await store.sendEvent({ runId: run.id, name: `e${i}`, payload: String(i) });
        await store.sendEvent({ runId: other.id, name: `x${i}`, payload: String(i) });
      }
      const whole = await store.listEvents(run.id);
      for (let limit = 1; limit <= 8; limit++) {
        const read = [];
        for (let after = 0, pages = 0; ; pages++) {
          if (pages > 20) throw new Error("readEvents never ends");
          const page = await store.readEvents({ runId: run.id, after, limit });
          expect(page.length).toBeLessThanOrEqual(limit);
          if (page.length === 0) break;
          read.push(...page);
          after = page[page.length - 1]!.seq;
        }
        expect(read, `limit ${limit}`).toEqual(whole);
      }
      expect(await store.readEvents({ runId: "run_nope", after: 0, limit: 5 })).toEqual([]);
    });

    it("pages events sent between pages with no gap and no repeat", async () => {
      const store = h.store();
      const run = await h.started();
      let after = 0;
      const read: string[] = [];
      for (let round = 0; round < 10; round++) {
        for (let i = 0; i < 3; i++) {
          await store.sendEvent({ runId: run.id, name: `e${round * 3 + i}`, payload: "0" });
        }
        const page = await store.readEvents({ runId: run.id, after, limit: 2 });
        read.push(...page.map((e) => e.name));
        after = page[page.length - 1]?.seq ?? after;
      }
      for (
        let page = await store.readEvents({ runId: run.id, after, limit: 2 });
        page.length > 0;
      ) {
        read.push(...page.map((e) => e.name));
        after = page[page.length - 1]!.seq;
        page = await store.readEvents({ runId: run.id, after, limit: 2 });
      }
      expect(read).toEqual(Array.from({ length: 30 }, (_, i) => `e${i}`));
    });

    it("refuses an after or limit that is not a whole number, naming the run", async () => {
      const store = h.store();
      for (const [after, limit] of [
        [-1, 5],
        [0.5, 5],
        [0, 0],
      ] as const) {
        await expect(store.readEvents({ runId: "run_x", after, limit })).rejects.toThrow(
          /readEvents\(\): "(after|limit)" must be a whole number .*run "run_x"/,
        );
      }
    });
  });
}
