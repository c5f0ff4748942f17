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
  return { ok: false, issues: res.issues, detail: formatIssues(res.issues) };
}

/** A schema's verdict, or what its validator threw (or rejected with): a call records
 *  either as its outcome, since an error handed over unrecorded would give a replay another
 *  outcome (or a loop, handed back). */
export function checkSchemaOrThrown<T>(
  schema: StandardSchemaV1<unknown, T>,
  value: unknown,
): Promise<SchemaCheck<T> | { thrown: unknown }> {
  return Promise.resolve()
    .then(() => checkSchema(schema, value))
    .then(
      (r) => r,
      (err: unknown) => ({ thrown: err }),
    );
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
