// Files a prompt points to by URL (an image, a PDF), downloaded inside the model call's
// step rather than by the SDK before it.
//
// The SDK downloads every URL part the model does not take as a URL before it calls the
// model. Before a durable model, that ran on every execution: a replayed call, answered
// from its record, downloaded its files again (network on replay, and a replay that failed
// when the server did), and a file that had changed since made the request digest differ,
// so the replay failed with NonDeterminismError. So the durable model tells the SDK it
// takes every URL as it is (EVERY_URL): the prompt reaches it with the URLs, its digest
// holds the URLs, and only a call that runs (the step's body) downloads them, as the SDK
// would have: the same choice of what to download (the model's own supportedUrls), the same
// download function (the SDK's, or the model option `download`), the same media types.

import type { Experimental_DownloadFunction as DownloadFunction } from "ai";
import { convertToLanguageModelPrompt } from "ai/internal";
import type { CallOptions, LanguageModelV4 } from "./sdk-types.js";

type Prompt = CallOptions["prompt"];

/** What the durable model tells the SDK it takes as a URL: everything. */
export const EVERY_URL: Record<string, RegExp[]> = { "*": [/^/] };

interface FileLike {
  type: string;
  data?: { type?: string };
}

/** Where a file given by URL sits in the prompt: its message, part, and the item of a
 *  tool result's content (or -1 for a part of the message itself). */
interface UrlPart {
  message: number;
  part: number;
  item: number;
  file: FileLike;
}

const isUrlFile = (p: FileLike | undefined): boolean =>
  p?.type === "file" && p.data?.type === "url";

/** The files the prompt gives by URL: parts of user messages, and files in the content of
 *  tool results (the tool's, or a provider's in an assistant message). */
function urlParts(prompt: Prompt): UrlPart[] {
  const found: UrlPart[] = [];
  prompt.forEach((m, message) => {
    if (!Array.isArray(m.content)) return;
    (m.content as FileLike[]).forEach((p, part) => {
      if (isUrlFile(p)) found.push({ message, part, item: -1, file: p });
      const output = (p as { output?: { type?: string; value?: unknown } }).output;
      if (p.type !== "tool-result" || output?.type !== "content") return;
      if (!Array.isArray(output.value)) return;
      (output.value as FileLike[]).forEach((f, item) => {
        if (isUrlFile(f)) found.push({ message, part, item, file: f });
      });
    });
  });
  return found;
}

/** Whether the prompt gives a file by URL. */
export function hasUrlParts(prompt: Prompt): boolean {
  return urlParts(prompt).length > 0;
}

/** The prompt as the model itself takes it: each file given by a URL it does not take
 *  downloaded and inlined, by the SDK's own conversion. The prompt is not changed; one
 *  without such files is returned as it is. */
export async function downloadUrlParts(
  prompt: Prompt,
  model: LanguageModelV4,
  download: DownloadFunction | undefined,
  abortSignal: AbortSignal,
): Promise<Prompt> {
  const found = urlParts(prompt);
  if (found.length === 0) return prompt;
  // One user message of the files alone: the SDK converts (and downloads) them as it does
  // any file part, and keeps their order.
  const [converted] = await convertToLanguageModelPrompt({
    prompt: {
      messages: [{ role: "user", content: found.map((f) => f.file) as never }],
    } as never,
    supportedUrls: await model.supportedUrls,
    download,
    abortSignal,
    provider: model.provider,
  });
  const files = (converted?.content ?? []) as FileLike[];
  if (files.length !== found.length) {
    throw new Error(
      `cairn/ai: the AI SDK converted ${found.length} files given by URL into ${files.length} parts; this version of the SDK is not one cairn/ai knows`,
    );
  }
  const out = prompt.map((m) => (Array.isArray(m.content) ? { ...m, content: [...m.content] } : m));
  found.forEach((f, i) => {
    const content = out[f.message]!.content as unknown as Array<Record<string, unknown>>;
    if (f.item < 0) {
      content[f.part] = files[i] as unknown as Record<string, unknown>;
      return;
    }
    const p = content[f.part]!;
    const output = p.output as { type: "content"; value: unknown[] };
    const value = [...output.value];
    value[f.item] = files[i];
    content[f.part] = { ...p, output: { ...output, value } };
  });
  return out as Prompt;
}
