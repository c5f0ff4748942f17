// workflow(): a workflow is a plain value — name, version, optional input schema, defaults,
// and the async function. Registering several versions of one name is how deploys keep
// in-flight runs on the code they started with.

import type { StandardSchemaV1 } from "@standard-schema/spec";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import { quoteGiven } from "../lib/text.js";
import type { Amounts } from "../store/store.js";
import type { WorkflowContext } from "./context-types.js";
import type { RetryPolicy } from "./retry.js";

export interface WorkflowOptions<I> {
  name: string;
  version: string;
  /** Standard Schema (zod, valibot, arktype, ...): invalid input is rejected at start. */
  input?: StandardSchemaV1<unknown, I>;
  /** Default retry policy for this workflow's steps. */
  retry?: Partial<RetryPolicy>;
  /** Default budget limits for this workflow's runs. */
  budget?: Amounts;
}

export interface Workflow<I = unknown, O = unknown> {
  readonly name: string;
  readonly version: string;
  readonly options: WorkflowOptions<I>;
  readonly fn: (ctx: WorkflowContext, input: I) => Promise<O>;
  /** "name@version": the identity a run is pinned to. */
  readonly id: string;
}

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;
const WORKFLOW_OPTIONS = ["name", "version", "input", "retry", "budget"];
const RETRY_OPTIONS = ["maxAttempts", "initialDelay", "maxDelay", "factor", "jitter"];

/** Whether `text` can be a workflow's name or version (workflow() refuses anything else). */
export function isWorkflowName(text: string): boolean {
  return NAME_RE.test(text);
}

export function workflow<I, O>(
  options: WorkflowOptions<I>,
  fn: (ctx: WorkflowContext, input: I) => Promise<O>,
): Workflow<I, O> {
  if (typeof options?.name !== "string" || !NAME_RE.test(options.name)) {
    throw new TypeError(
      `workflow(): name ${quoteGiven(options?.name)} is invalid; use 1-128 characters of letters, digits and . _ : / - (not starting with a symbol)`,
    );
  }
  if (typeof options.version !== "string" || !NAME_RE.test(options.version)) {
    throw new TypeError(
      `workflow(): version of "${options.name}" must be 1-128 characters of letters, digits and . _ : / - (not starting with a symbol; got ${JSON.stringify(typeof options.version === "string" ? options.version.slice(0, 200) : options.version)})`,
    );
  }
  if (typeof fn !== "function") {
    throw new TypeError(
      `workflow(): "${options.name}" needs an async function as its second argument`,
    );
  }
  // A misspelt option (retries: 5, Inngest's name for it) or retry field (max) was dropped:
  // every step of the workflow ran with the default policy.
  const unknown = unknownOptionNames(options, WORKFLOW_OPTIONS);
  if (unknown.length > 0) {
    throw new TypeError(
      `workflow(): "${options.name}": ${unknownOptionsText(unknown, WORKFLOW_OPTIONS)}`,
    );
  }
  const unknownRetry = unknownOptionNames(options.retry, RETRY_OPTIONS);
  if (unknownRetry.length > 0) {
    throw new TypeError(
      `workflow(): "${options.name}": retry: ${unknownOptionsText(unknownRetry, RETRY_OPTIONS)}`,
    );
  }
  return Object.freeze({
    name: options.name,
    version: options.version,
    options,
    fn,
    id: `${options.name}@${options.version}`,
  });
}

/** A workflow of any input and output, as registries (engines) hold them. */
// biome-ignore lint/suspicious/noExplicitAny: a registry holds workflows of any input/output type
export type AnyWorkflow = Workflow<any, any>;
