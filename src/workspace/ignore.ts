// Which paths of a workspace are not part of its state: .gitignore semantics (patterns of
// a .gitignore file apply below its directory; the last matching pattern wins; a deeper
// file overrides a shallower one; "!" re-includes; a trailing "/" matches directories
// only; a pattern with a "/" before its end is anchored to its file's directory; "*", "?",
// "[...]" and "**"), with the workspace's own patterns (defaults and options) below every
// .gitignore file, as git's info/exclude is. An ignored directory is not entered, so a
// path below it cannot be re-included (as in git).

interface Rule {
  negate: boolean;
  dirOnly: boolean;
  re: RegExp;
}

/** The patterns of one .gitignore file (or of the options), for paths relative to `base`. */
export interface RuleSet {
  /** Directory the patterns are relative to ("" = the workspace root). */
  base: string;
  rules: Rule[];
}

export const DEFAULT_IGNORE = ["node_modules", ".git"];

function escapeRe(c: string): string {
  return /[\\^$.*+?()[\]{}|/]/.test(c) ? `\\${c}` : c;
}

/** One glob (without "!", trailing "/" or leading "/") as a regular expression body. */
function globBody(glob: string): string {
  let out = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "\\" && i + 1 < glob.length) {
      out += escapeRe(glob[++i]!);
    } else if (c === "*") {
      if (glob[i + 1] === "*") {
        const atStart = i === 0;
        const afterSlash = glob[i - 1] === "/";
        const beforeSlash = glob[i + 2] === "/";
        const atEnd = i + 2 === glob.length;
        if ((atStart || afterSlash) && beforeSlash) {
          out += "(?:.*/)?";
          i += 2;
          continue;
        }
        if (afterSlash && atEnd) {
          out += ".*";
          i += 1;
          continue;
        }
        out += "[^/]*";
        i += 1;
        continue;
      }
      out += "[^/]*";
    } else if (c === "?") {
      out += "[^/]";
    } else if (c === "[") {
      const close = glob.indexOf("]", i + 2);
      if (close < 0) {
        out += "\\[";
        continue;
      }
      let cls = glob.slice(i + 1, close);
      const negated = cls.startsWith("!") || cls.startsWith("^");
      if (negated) cls = cls.slice(1);
      cls = cls.replace(/\\/g, "\\\\").replace(/\]/g, "\\]");
      out += `[${negated ? "^" : ""}${cls}]`;
      i = close;
    } else {
      out += escapeRe(c);
    }
  }
  return out;
}

/** Parses patterns (lines of a .gitignore file). Invalid ones are skipped, as git does. */
export function parseIgnore(text: string, base = ""): RuleSet {
  const rules: Rule[] = [];
  for (const raw of text.split(/\r?\n/)) {
    // Trailing spaces are dropped unless escaped.
    let line = raw.replace(/(?<!\\)\s+$/, "");
    if (line === "" || line.startsWith("#")) continue;
    let negate = false;
    if (line.startsWith("!")) {
      negate = true;
      line = line.slice(1);
    }
    let dirOnly = false;
    if (line.endsWith("/") && !line.endsWith("\\/")) {
      dirOnly = true;
      line = line.replace(/\/+$/, "");
    }
    if (line === "") continue;
    const anchored = line.includes("/");
    if (line.startsWith("/")) line = line.slice(1);
    if (line === "") continue;
    try {
      const body = globBody(line);
      rules.push({
        negate,
        dirOnly,
        re: new RegExp(anchored ? `^${body}$` : `^(?:.*/)?${body}$`, "s"),
      });
    } catch {
      // A pattern that is not a valid expression matches nothing.
    }
  }
  return { base, rules };
}

/**
 * Decides, for a path relative to the workspace root, whether it is ignored, given the rule
 * sets that apply (outermost first: the workspace's patterns, then .gitignore files from
 * the root down). Returns undefined when no pattern matches.
 */
function verdict(sets: readonly RuleSet[], path: string, isDir: boolean): boolean | undefined {
  let ignored: boolean | undefined;
  for (const set of sets) {
    let rel: string;
    if (set.base === "") rel = path;
    else if (path.startsWith(`${set.base}/`)) rel = path.slice(set.base.length + 1);
    else continue;
    for (const r of set.rules) {
      if (r.dirOnly && !isDir) continue;
      if (r.re.test(rel)) ignored = !r.negate;
    }
  }
  return ignored;
}

export function isIgnored(sets: readonly RuleSet[], path: string, isDir: boolean): boolean {
  return verdict(sets, path, isDir) === true;
}
