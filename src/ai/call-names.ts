// Names of the calls cairn/ai records. A model call is named after its model
// ("model:gpt-4o"; turns share the name and are keyed model:gpt-4o, model:gpt-4o#2, ... in
// call order, which ordered replay makes the same on every replay). A tool call is named
// after the tool and the tool call id the recorded model response gave it
// ("tool:search:call_8f2..."), unique per call, so parallel tool calls replay exactly.

import { createHash } from "node:crypto";
import { checkText } from "../lib/text.js";
import { isCallName } from "../workflow/context.js";

const MAX_NAME = 200;

/** A lone surrogate (half of a UTF-16 pair), which no store holds exactly (nor a NUL). */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

const escaped = (c: string) => `%u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;

/** A call name from parts: "#" (cairn's numbering mark) and "%" are percent-encoded, and a
 *  name past cairn's 200-character limit keeps its start and a hash of the whole. A NUL or
 *  a lone surrogate (a tool call id is the provider's text) is encoded as "%u<hex>": cairn
 *  refuses such a name, and the tool would never run (the model got cairn's TypeError). */
export function callName(...parts: string[]): string {
  const name = parts
    .map((p) =>
      p
        .replaceAll("%", "%25")
        .replaceAll("#", "%23")
        .replace(/\s/g, "_")
        .replaceAll("\u0000", escaped("\u0000"))
        .replace(LONE_SURROGATE, escaped),
    )
    .join(":");
  if (name.length <= MAX_NAME) return name;
  const h = createHash("sha256").update(name).digest("base64url").slice(0, 22);
  // Never cut a character in two (an emoji is two UTF-16 units): cairn refuses broken text.
  let end = MAX_NAME - 24;
  const last = name.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return `${name.slice(0, end)}:~${h}`;
}

/** Refuses a name given to `who` ("ai.model()", "ai.tools()") that a step could not have
 *  (ctx.step's own rule): refused only at the first call, inside the SDK, streamText hid
 *  the reason behind "No output generated". */
export function checkGivenName(runId: string, who: string, name: unknown): asserts name is string {
  if (!isCallName(name)) {
    throw new TypeError(
      `${who} in run "${runId}": name ${typeof name === "string" ? JSON.stringify(name.slice(0, 80)) : String(name)} cannot name its calls; give 1-200 characters, without "#" (cairn numbers the calls name, name#2, ...), not starting with "@" or a space`,
    );
  }
  checkText(name, `${who} in run "${runId}": name`);
}
