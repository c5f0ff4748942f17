// Where a non-deterministic program's one non-deterministic call lands (gen-grammar.ts,
// Case.nondetWhere): the call wrapped, innermost last, in the places an agent's code is
// non-deterministic: a child run, one of several parallel branches, a Promise.race winner,
// a catch block, a try whose catch drops every error, a loop, after a durable sleep or wait. The wrappers hold only plain steps
// of their own (names unique by node id, so they obey the naming rule wherever they land),
// so nothing but the non-deterministic call decides whether the replay is caught.

import type { Node, NondetHow } from "./gen-program.js";

export const NONDET_PLACES = [
  "child",
  "par",
  "race",
  "catch",
  "swallow",
  "loop",
  "sleep",
  "wait",
] as const;
export type NondetPlace = (typeof NONDET_PLACES)[number];

/** Wrappers that cannot hold this call at this depth are left out (see the grammar's header:
 *  a race winner holds no child, so neither a child wrapper nor a child call in it). */
export function usablePlaces(how: NondetHow, where: NondetPlace[]): NondetPlace[] {
  const out: NondetPlace[] = [];
  let inRace = false;
  for (const w of where) {
    if (inRace && w === "child") continue;
    if (w === "race") {
      if (how === "input-inc" || how === "child-wf-inc") continue;
      inRace = true;
    }
    out.push(w);
  }
  return out;
}

/**
 * The nodes standing for the non-deterministic call `nd` in its places (outermost first).
 * `next` numbers node ids; `branch` picks which parallel branch holds the call.
 */
export function placeNondet(
  nd: Node,
  where: NondetPlace[],
  next: { id: number },
  branch: number,
): Node[] {
  const id = () => `n${next.id++}`;
  const filler = (delay: number): Node => {
    const i = id();
    return { t: "step", id: i, name: `plan:${i}`, delay, spend: 1, mode: "ok" };
  };
  let inner: Node[] = [nd];
  for (const w of [...where].reverse()) {
    switch (w) {
      case "child": {
        const i = id();
        const body = [filler(1), ...inner, filler(0)];
        inner = [{ t: "child", id: i, name: `holder:${i}`, body, uniqueNames: true }];
        break;
      }
      case "par": {
        const i = id();
        const holder = [filler(branch % 3), ...inner, filler(1)];
        const other = [filler(2), filler(0)];
        const branches = branch % 2 === 0 ? [holder, other] : [other, holder];
        inner = [{ t: "par", id: i, branches: [...branches, [filler(branch % 4)]] }];
        break;
      }
      case "race": {
        const i = id();
        const loser = { t: "gated" as const, id: `${i}.l0`, name: `review:${i}.l0`, delay: 1 };
        inner = [{ t: "race", id: i, winner: [filler(1), ...inner], losers: [loser] }];
        break;
      }
      case "catch": {
        const i = id();
        const f = id();
        const fatal: Node = {
          t: "step",
          id: f,
          name: `edit:${f}`,
          delay: 1,
          spend: 2,
          mode: "fatal",
        };
        inner = [{ t: "try", id: i, body: [filler(0), fatal], handler: [...inner, filler(1)] }];
        break;
      }
      case "swallow":
        // Agent code that drops every error: cairn's own refusal must not be dropped with it.
        inner = [{ t: "try", id: id(), body: inner, handler: [filler(0)], catchAll: true }];
        break;
      case "loop":
        inner = [{ t: "loop", id: id(), n: 2, body: [filler(1), ...inner] }];
        break;
      case "sleep": {
        const i = id();
        inner = [{ t: "sleep", id: i, name: `nap:${i}`, ms: 5 }, ...inner];
        break;
      }
      case "wait": {
        const i = id();
        inner = [{ t: "wait", id: i, event: `ev-${i}`, timeoutMs: 7, sent: false }, ...inner];
        break;
      }
    }
  }
  return inner;
}
