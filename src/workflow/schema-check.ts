// Checking a value against a Standard Schema (zod, valibot, arktype, ...): the validated
// value, or the issues in one line a person can act on ("path.to.field: message; ...").

import type { StandardSchemaV1 } from "@standard-schema/spec";

export type SchemaCheck<T> =
  | { ok: true; value: T }
  | { ok: false; issues: ReadonlyArray<StandardSchemaV1.Issue>; detail: string };

export async function checkSchema<T>(
  schema: StandardSchemaV1<unknown, T>,
  value: unknown,
): Promise<SchemaCheck<T>> {
  const res = await schema["~standard"].validate(value);
  if (!res.issues) return { ok: true, value: res.value };
  const detail = res.issues
    .map(
      (i) =>
        `${i.path?.length ? `${i.path.map((p) => (typeof p === "object" ? p.key : p)).join(".")}: ` : ""}${i.message}`,
    )
    .join("; ");
  return { ok: false, issues: res.issues, detail };
}

/** A Standard Schema's issues in one line: "path: message; ...". */
export function formatIssues(
  issues: ReadonlyArray<{ message: string; path?: ReadonlyArray<unknown> }>,
): string {
  return issues
    .map((i) => {
      const path = (i.path ?? []).map((p) =>
        typeof p === "object" && p !== null && "key" in p ? String(p.key) : String(p),
      );
      return `${path.length > 0 ? `${path.join(".")}: ` : ""}${i.message}`;
    })
    .join("; ");
}
