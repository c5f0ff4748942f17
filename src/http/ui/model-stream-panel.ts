// The run page's Model stream panel: what the run's streamed model calls (cairn/ai,
// `stream: true`) have said so far, one block per call, drawn on the server; the page's
// script then follows the live stream from the next offset (data-stream, data-from) and
// appends to the blocks. A call's later execution (a higher attempt, or a higher generation
// after a resume, where attempts start again at 1) replaces what its earlier one showed.
// Not a live region: the live refresh never swaps it, so appended text is not drawn twice.

import { html } from "hono/html";
import { isLaterExecution } from "../../ai/run-stream.js";
import { chunkJson } from "../api/model-stream.js";
import { runIdSegment } from "../run-id-segment.js";
import { cut, isFinished } from "./format.js";
import type { Html, UiDeps } from "./layout.js";

/** Chunks the page draws (beyond them it says so; the API has them all). */
const MAX_CHUNKS = 5_000;
const PAGE = 500;

interface CallBlock {
  call: string;
  name: string;
  generation: number;
  attempt: number;
  text: string;
  reasoning: string;
  notes: string[];
}

type Part = { type: string; delta?: string; toolName?: string; input?: unknown } & Record<
  string,
  unknown
>;

/** Folds one chunk into the blocks (the same rules as the page's script). */
function apply(blocks: Map<string, CallBlock>, c: Record<string, unknown>): void {
  const call = c.call as string;
  const generation = c.generation as number;
  const attempt = c.attempt as number;
  let b = blocks.get(call);
  if (!b || isLaterExecution(generation, attempt, b.generation, b.attempt)) {
    b = { call, name: c.name as string, generation, attempt, text: "", reasoning: "", notes: [] };
    blocks.set(call, b);
  }
  if (isLaterExecution(b.generation, b.attempt, generation, attempt)) return;
  const p = c.part as Part;
  if (p.type === "text-delta") b.text += p.delta ?? "";
  else if (p.type === "reasoning-delta") b.reasoning += p.delta ?? "";
  else if (p.type === "tool-call") b.notes.push(`tool call: ${String(p.toolName)}`);
  else if (p.type === "error") b.notes.push("error");
  else if (p.type === "finish") b.notes.push("finished");
  else if (p.type === "undecodable") b.notes.push("a part that cannot be decoded");
}

export async function modelStreamPanel(
  deps: UiDeps,
  run: { id: string; status: string },
): Promise<Html | undefined> {
  const blocks = new Map<string, CallBlock>();
  let from = 0;
  let cutShort = false;
  for (;;) {
    const chunks = await deps.engine.readStream(run.id, { from, limit: PAGE });
    for (const ch of chunks) apply(blocks, chunkJson(ch));
    if (chunks.length > 0) from = chunks[chunks.length - 1]!.offset + 1;
    if (chunks.length < PAGE) break;
    if (from >= MAX_CHUNKS) {
      cutShort = true;
      break;
    }
  }
  const live = !isFinished(run.status);
  if (blocks.size === 0 && !live) return undefined;
  const api = `${deps.basePath}/api/live/runs/${runIdSegment(run.id)}/stream`;
  return html`<section class="panel" id="model-stream"${blocks.size === 0 ? html` hidden` : ""}${live && !cutShort ? html` data-stream="${api}" data-from="${String(from)}"` : ""}>
  <h2>Model stream ${live ? html`<span class="tag" data-stream-state>live</span>` : ""}</h2>
  <div class="mcalls">${[...blocks.values()].map(callBlock)}</div>
  ${cutShort ? html`<p class="muted">Only the first ${String(MAX_CHUNKS)} chunks are shown; the API has them all.</p>` : ""}
</section>`;
}

function callBlock(b: CallBlock): Html {
  return html`<div class="mcall" data-call="${b.call}" data-generation="${String(b.generation)}" data-attempt="${String(b.attempt)}">
  <div class="mhead"><code>${cut(b.name, 80)}</code> <span class="muted" data-role="attempt">${b.attempt > 1 ? `attempt ${b.attempt}` : ""}</span> <span class="muted" data-role="notes">${b.notes.join(" · ")}</span></div>
  <pre class="mreason" data-role="reasoning"${b.reasoning === "" ? html` hidden` : ""}>${b.reasoning}</pre>
  <pre class="mtext" data-role="text">${b.text}</pre>
</div>`;
}
