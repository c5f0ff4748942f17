// Identifiers: prefixed, random, URL-safe. Every message that mentions one quotes it.

import { createHash, randomBytes } from "node:crypto";

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString("base64url")}`;
}

/** The idempotency key of a step: stable for (run id, step key), the same on every attempt. */
export function idempotencyKey(runId: string, stepKey: string): string {
  const h = createHash("sha256").update(runId).update("\u0000").update(stepKey).digest("base64url");
  return `ck_${h.slice(0, 32)}`;
}
