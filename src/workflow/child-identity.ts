// What a ctx.child call's intent records of the child it started: the child's id, the
// workflow's name and a digest of the input the code handed in. A replay hands the parent
// the recorded child's result, so it must be the same child: a call that now names another
// workflow, or hands another input, would silently take a result that is not its own. The
// digest, not the input, is kept: the child run stores the input already, and a parent's
// journal must not double a large payload. Intents written before cairn recorded these
// fields hold only the child id: nothing is compared for them.

import { createHash } from "node:crypto";
import { encodeIdentities } from "../codec/codec.js";

/** A child call's intent data. `workflow` and `input` are absent from older records. */
export interface ChildIntent {
  childId: string;
  /** The child workflow's name. */
  workflow?: string;
  /** A digest of the input as the code handed it in (before the child's input schema). */
  input?: string;
}

/** Marks a digest that counted an input's Errors by every part but their stacks. Digests
 *  of inputs without an Error carry no mark: they are what cairn always took. Those with an
 *  Error and no mark counted its name, message and code only (cairn before the mark). */
const ERRORS_BY_PARTS = "e2.";

/** What a child call is now: its workflow's name (undefined: not a workflow) and the
 *  digest of its input (undefined: the input cannot be encoded). */
export interface ChildCallIdentity {
  workflow: string | undefined;
  input: string | undefined;
  /** For an input with an Error, its digest as cairn took it before ERRORS_BY_PARTS (to
   *  compare with a digest recorded then); absent when that is `input`. */
  inputByName?: string;
}

/** The digests of a child's input (ChildCallIdentity's `input` and `inputByName`). The
 *  value as handed in, not as its schema makes it: a schema's default drawn afresh (a request
 *  id, the time) is no change of the call. An Error in it counts without its stack, a typed
 *  array by the bytes it shows (encodeIdentity): the frames of the code that made an Error,
 *  or the bytes around a view, are no part of what the child is handed to do. `input` is
 *  undefined for an input the codec refuses (refused when the child is created: the refusal
 *  is the outcome). */
export function childInputDigests(
  input: unknown,
): Pick<ChildCallIdentity, "input" | "inputByName"> {
  try {
    const { text, byName } = encodeIdentities(input);
    if (byName === undefined) return { input: digest(text) };
    return { input: ERRORS_BY_PARTS + digest(text), inputByName: digest(byName) };
  } catch {
    return { input: undefined };
  }
}

/** The digest of a child's input (childInputDigests' `input`). */
export function childInputDigest(input: unknown): string | undefined {
  return childInputDigests(input).input;
}

/** Whether `recorded`, a digest of a child's input taken by this or an older cairn, is the
 *  digest of the input the call hands now: by Errors' every part when it was taken so, by
 *  their name, message and code when it was taken before. */
export function sameInputDigest(
  recorded: string,
  now: Pick<ChildCallIdentity, "input" | "inputByName">,
): boolean {
  if (recorded.startsWith(ERRORS_BY_PARTS)) return recorded === now.input;
  return recorded === (now.inputByName ?? now.input);
}

/** Whether `kept` is a digest taken before ERRORS_BY_PARTS and `now` one of an input with
 *  an Error taken since: the two cannot be compared (the input's Errors were counted two
 *  ways). */
export function isDigestOfOlderErrors(kept: string, now: string | undefined): boolean {
  return !kept.startsWith(ERRORS_BY_PARTS) && now?.startsWith(ERRORS_BY_PARTS) === true;
}

function digest(text: string): string {
  return createHash("sha256").update(text).digest("base64url");
}

/** A child run a call found already created under its id, with no intent recorded (the
 *  worker died between the child's create and its intent): what it was started as.
 *  `sameInput` says whether it was started with the input the call hands in now (by the
 *  digest of the input as handed, which the child run keeps); undefined when that cannot be
 *  told (a child created before cairn kept the digest, through its input schema or on
 *  another version: its stored input is what that code made of the input). */
export interface FoundChild {
  workflow: string;
  version: string;
  sameInput: boolean | undefined;
}

/** How the call differs from the child it found, in words that quote no payload. A child
 *  of another version started with the same input is this call's: the call would have
 *  taken its result had the intent been recorded before the crash. */
export function foundChildMismatch(found: FoundChild, now: ChildCallIdentity): string | undefined {
  const child = `the child run this call created before a crash (its intent was never recorded) is of workflow "${found.workflow}" (version "${found.version}")`;
  if (found.workflow !== now.workflow) return otherWorkflow(child, now);
  return found.sameInput === false ? otherInput(child) : undefined;
}

/** How the call differs from the recorded one, in words that quote no payload; undefined
 *  when it matches, or the record does not say. */
export function childMismatch(recorded: ChildIntent, now: ChildCallIdentity): string | undefined {
  const child = `the journal recorded a child run of workflow "${recorded.workflow ?? "?"}"`;
  if (recorded.workflow !== undefined && recorded.workflow !== now.workflow) {
    return otherWorkflow(child, now);
  }
  if (recorded.input !== undefined && !sameInputDigest(recorded.input, now))
    return otherInput(child);
  return undefined;
}

function otherWorkflow(child: string, now: ChildCallIdentity): string {
  const code =
    now.workflow === undefined ? "something that is not a workflow" : `"${now.workflow}"`;
  return `${child}, the code now starts ${code}`;
}

function otherInput(child: string): string {
  return `${child} started with another input than the code now hands it (the recorded child's result belongs to that input)`;
}
