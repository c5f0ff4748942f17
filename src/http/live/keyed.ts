// Items of a live feed's state by key, each with its JSON signature: a feed tells a client
// only the items that are new or differ from the last reading.

import type { LiveMessage } from "./hub.js";

export type Json = Record<string, unknown>;

export interface Keyed {
  key: string;
  json: Json;
  sig: string;
}

export function keyed(items: Json[], keyOf: (j: Json) => string): Keyed[] {
  return items.map((json) => ({ key: keyOf(json), json, sig: JSON.stringify(json) }));
}

/** Messages for the items of `next` that are new or differ from `prev`. */
export function upserts(
  prev: Keyed[],
  next: Keyed[],
  make: (j: Json) => LiveMessage,
): LiveMessage[] {
  const before = new Map(prev.map((k) => [k.key, k.sig]));
  return next.filter((k) => before.get(k.key) !== k.sig).map((k) => make(k.json));
}
