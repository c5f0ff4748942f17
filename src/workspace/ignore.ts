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
  /** Whether the pattern matches a path (relative to its rule set's base). */
  matches: (path: string) => boolean;
}

/** The patterns of one .gitignore file (or of the options), for paths relative to `base`. */
export interface RuleSet {
  /** Directory the patterns are relative to ("" = the workspace root). */
  base: string;
  rules: Rule[];
}

export const DEFAULT_IGNORE = ["node_modules", ".git"];

/** cairn's own state (the default SQLite store .cairn/cairn.db, workspaces under
 *  .cairn/workspaces), ignored even with defaultIgnore: false. A workspace on a project's
 *  directory held its store: a restore rewrote the database files under the open
 *  connection, and the store was damaged. */
export const CAIRN_IGNORE = [".cairn"];

// A pattern is compiled to a sequence of tokens and matched by simulating the automaton over
// the path, one character at a time: time linear in path x pattern, whatever the pattern.
// (A regular expression backtracks: "*a*a*a*a*a*a*a*a*b" in a .gitignore of a cloned
// repository took 1.8 s against a 42-character name, growing about as the 9th power of its
// length, with the worker's event loop held.)
type Token =
  | { k: "lit"; c: string }
  /** "?": one character but "/". */
  | { k: "one" }
  /** "[...]": one character of the class (a one-character regular expression). */
  | { k: "cls"; re: RegExp }
  /** "*": any run of characters but "/". */
  | { k: "star" }
  /** "/**" at the end: anything. */
  | { k: "all" }
  /** "**\/" at the start or after "/": nothing, or anything that ends with "/". */
  | { k: "dirs" };

/** One glob (without "!", trailing "/" or leading "/") as tokens. Throws on a class that is
 *  not a valid expression. */
function globTokens(glob: string): Token[] {
  const out: Token[] = [];
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "\\" && i + 1 < glob.length) {
      out.push({ k: "lit", c: glob[++i]! });
    } else if (c === "*") {
      if (glob[i + 1] === "*") {
        const atStart = i === 0;
        const afterSlash = glob[i - 1] === "/";
        const beforeSlash = glob[i + 2] === "/";
        const atEnd = i + 2 === glob.length;
        if ((atStart || afterSlash) && beforeSlash) {
          out.push({ k: "dirs" });
          i += 2;
          continue;
        }
        if (afterSlash && atEnd) {
          out.push({ k: "all" });
          i += 1;
          continue;
        }
        out.push({ k: "star" });
        i += 1;
        continue;
      }
      out.push({ k: "star" });
    } else if (c === "?") {
      out.push({ k: "one" });
    } else if (c === "[") {
      const cls = classToken(glob, i);
      if (!cls) {
        out.push({ k: "lit", c: "[" });
        continue;
      }
      out.push(cls.token);
      i = cls.end;
    } else {
      out.push({ k: "lit", c });
    }
  }
  return out;
}

/** The POSIX classes git's wildmatch knows ("[[:digit:]]"), as regular expression ranges. */
const POSIX_CLASSES: Record<string, string> = {
  alnum: "A-Za-z0-9",
  alpha: "A-Za-z",
  blank: " \\t",
  cntrl: "\\x00-\\x1f\\x7f",
  digit: "0-9",
  graph: "\\x21-\\x7e",
  lower: "a-z",
  print: "\\x20-\\x7e",
  punct: "!-\\/:-@\\[-`{-~",
  space: " \\t\\n\\r\\f\\v",
  upper: "A-Z",
  xdigit: "0-9A-Fa-f",
};

/** The "[...]" class opening at glob[i], as git reads it: "!" or "^" negates, a "]" first is
 *  a member, "\\x" is x, "[:digit:]" a POSIX class; and the index of its "]". Undefined
 *  when it never closes (the "[" is then a literal). Throws on an invalid range. */
function classToken(glob: string, i: number): { token: Token; end: number } | undefined {
  let j = i + 1;
  const negated = glob[j] === "!" || glob[j] === "^";
  if (negated) j++;
  const member = (ch: string) => (/[\\\][^-]/.test(ch) ? `\\${ch}` : ch);
  let src = "";
  for (const first = j; j < glob.length; ) {
    const c = glob[j]!;
    if (c === "]" && j > first) {
      return {
        token: { k: "cls", re: new RegExp(`^[${negated ? "^" : ""}${src}]$`, "s") },
        end: j,
      };
    }
    const posix = c === "[" && glob[j + 1] === ":" ? /^\[:([a-z]+):\]/.exec(glob.slice(j)) : null;
    if (posix && POSIX_CLASSES[posix[1]!] !== undefined) {
      src += POSIX_CLASSES[posix[1]!];
      j += posix[0].length;
    } else if (c === "\\" && j + 1 < glob.length) {
      src += member(glob[j + 1]!);
      j += 2;
    } else {
      src += c === "-" ? "-" : member(c);
      j++;
    }
  }
  return undefined;
}

/** A matcher of whole paths for `tokens` (code unit by code unit, as a regular expression
 *  without the u flag would). State 2i is "at token i", 2i+1 "inside the dirs token i" (it
 *  consumed something, so it may only end after a "/"). */
function matcher(tokens: Token[]): (path: string) => boolean {
  const m = tokens.length;
  // The literal characters the pattern ends (and, anchored, starts) with must end (start)
  // the path: most paths fail that test and never reach the automaton.
  let tail = "";
  for (let i = m - 1; i >= 0; i--) {
    const t = tokens[i]!;
    if (t.k !== "lit") break;
    tail = t.c + tail;
  }
  let head = "";
  for (const t of tokens) {
    if (t.k !== "lit") break;
    head += t.c;
  }
  // State sets as lists, with a stamp per step for membership (no allocation per character).
  const size = 2 * (m + 1);
  const seen = new Uint32Array(size);
  let stamp = 0;
  let now = new Int32Array(size);
  let next = new Int32Array(size);
  /** Adds state `s` and what it reaches without a character to `list` (of length `len`). */
  const close = (list: Int32Array, len: number, s: number): number => {
    for (let at = s; ; at += 2) {
      if (seen[at] === stamp) return len;
      seen[at] = stamp;
      list[len++] = at;
      const t = tokens[at >> 1];
      // star, all and an unentered dirs may match nothing: the next token is reachable.
      if (at & 1 || !t || (t.k !== "star" && t.k !== "all" && t.k !== "dirs")) return len;
    }
  };
  return (path) => {
    if (!path.endsWith(tail) || !path.startsWith(head)) return false;
    stamp = stamp === 0xffffffff ? 1 : stamp + 1;
    if (stamp === 1) seen.fill(0);
    let len = close(now, 0, 0);
    for (let p = 0; p < path.length && len > 0; p++) {
      const c = path[p]!;
      stamp = stamp === 0xffffffff ? 1 : stamp + 1;
      if (stamp === 1) seen.fill(0);
      let nlen = 0;
      for (let j = 0; j < len; j++) {
        const s = now[j]!;
        const i = s >> 1;
        const t = tokens[i];
        if (!t) continue;
        switch (t.k) {
          case "lit":
            if (c === t.c) nlen = close(next, nlen, 2 * (i + 1));
            break;
          case "one":
            if (c !== "/") nlen = close(next, nlen, 2 * (i + 1));
            break;
          case "cls":
            // As "?" and "*", a class never matches the separator (git's FNM_PATHNAME).
            if (c !== "/" && t.re.test(c)) nlen = close(next, nlen, 2 * (i + 1));
            break;
          case "star":
            if (c !== "/") nlen = close(next, nlen, 2 * i);
            break;
          case "all":
            nlen = close(next, nlen, 2 * i);
            break;
          case "dirs":
            nlen = close(next, nlen, 2 * i + 1);
            if (c === "/") nlen = close(next, nlen, 2 * (i + 1));
            break;
        }
      }
      [now, next] = [next, now];
      len = nlen;
    }
    for (let j = 0; j < len; j++) if (now[j] === 2 * m) return true;
    return false;
  };
}

/** Parses patterns (lines of a .gitignore file). Invalid ones are skipped, as git does. */
export function parseIgnore(text: string, base = ""): RuleSet {
  const rules: Rule[] = [];
  for (const raw of text.split(/\r?\n/)) {
    // Trailing spaces are dropped unless escaped (spaces only: git keeps a trailing tab).
    let line = raw.replace(/(?<!\\) +$/, "");
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
      const tokens = globTokens(line);
      // Unanchored: the pattern may match below any directory.
      rules.push({
        negate,
        dirOnly,
        matches: matcher(anchored ? tokens : [{ k: "dirs" }, ...tokens]),
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
      if (r.matches(rel)) ignored = !r.negate;
    }
  }
  return ignored;
}

export function isIgnored(sets: readonly RuleSet[], path: string, isDir: boolean): boolean {
  return verdict(sets, path, isDir) === true;
}
