// Small formatting helpers for the dashboard's HTML: durations, ages, amounts, values.
// Everything here returns plain text; the html`` tag escapes it where it is used.

import type { Amounts, RunStatus } from "../../index.js";
import { formatAmount } from "../../lib/amounts.js";
import { leadingText } from "../../lib/text.js";
import { TERMINAL_STATUSES } from "../../store-api.js";

/** Whether a run's status is final: completed, failed or canceled. */
export function isFinished(status: unknown): boolean {
  return TERMINAL_STATUSES.has(status as RunStatus);
}

/** 850ms, 1.2s, 3m 20s, 2h 5m, 2d 3h. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return "-";
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1).replace(/\.0$/, "")}s`;
  const s = Math.floor(ms / 1_000);
  if (s < 3_600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)}h ${Math.floor((s % 3_600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3_600)}h`;
}

/** An amount as every part of cairn writes it (lib/amounts.ts), thousands grouped. */
export function number(n: number): string {
  return formatAmount(n, { grouping: true });
}

/** "usd 0.42 · tokens 1,200", or "" when nothing. */
export function amounts(a: Amounts): string {
  return Object.keys(a)
    .sort()
    .map((k) => `${k} ${number(a[k] ?? 0)}`)
    .join(" · ");
}

/** Pretty JSON of an already JSON-safe value. */
export function pretty(value: unknown): string {
  return JSON.stringify(value, null, 2) ?? "null";
}

/** Cuts text for a table cell. */
export function cut(text: string, max: number): string {
  return text.length > max ? `${leadingText(text, max - 1)}…` : text;
}
