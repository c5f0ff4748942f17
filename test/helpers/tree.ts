// A directory as data, for comparing workspace trees byte for byte: every entry (never
// following a symlink) with its type, permission bits, and content (base64) or target.

import { lstatSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";

export type TreeEntry =
  | { type: "file"; mode: string; content: string }
  | { type: "dir"; mode: string }
  | { type: "symlink"; target: string };

/** Every entry under `dir` by relative path, sorted; `skip` names are not entered. */
export function treeOf(dir: string, skip: readonly string[] = []): Record<string, TreeEntry> {
  const out: Record<string, TreeEntry> = {};
  const visit = (rel: string) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      if (skip.includes(name)) continue;
      const path = rel === "" ? name : `${rel}/${name}`;
      const abs = join(dir, path);
      const st = lstatSync(abs);
      const mode = (st.mode & 0o777).toString(8);
      if (st.isSymbolicLink()) out[path] = { type: "symlink", target: readlinkSync(abs) };
      else if (st.isDirectory()) {
        out[path] = { type: "dir", mode };
        visit(path);
      } else out[path] = { type: "file", mode, content: readFileSync(abs).toString("base64") };
    }
  };
  visit("");
  return out;
}
