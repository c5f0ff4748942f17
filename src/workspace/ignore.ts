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
  /** Matched after every other set, so no pattern there re-includes what it ignores. */
  final?: boolean;
}

/** The defaults a .gitignore may re-include ("!node_modules/"). */
export const DEFAULT_IGNORE = ["node_modules"];

/** The defaults no .gitignore pattern re-includes: git never looks in .git, but "!*\/" (of
 *  a whitelist: "*", "!*\/", "!*.py") re-included it, and a restore then rewrote the packs
 *  of another machine's repository. */
export const FINAL_DEFAULT_IGNORE = [".git"];

/** cairn's own state (the default SQLite store .cairn/cairn.db, workspaces under
 *  .cairn/workspaces), ignored even with defaultIgnore: false. A workspace on a project's
 *  directory held its store: a restore rewrote the database files under the open
 *  connection, and the store was damaged. */
export const CAIRN_IGNORE = [".cairn"];

/** Whether `path` ("/"-separated) is cairn's state or inside it, at any depth. Not a
 *  pattern: no .gitignore or option pattern ("!.cairn", "!*\/") can re-include it. */
export function isCairnState(path: string): boolean {
  return path.split("/").some((name) => CAIRN_IGNORE.includes(name));
}

// A pattern is compiled to a sequence of tokens and matched by simulating the automaton over
// the path, one character at a time: time linear in path x pattern, whatever the pattern.
// (A regular expression backtracks: "*a*a*a*a*a*a*a*a*b" in a .gitignore of a cloned
// repository took 1.8 s against a 42-character name, growing about as the 9th power of its
// length, with the worker's event loop held.)
type Token =
  | { k: "lit"; c: string }
  /** "?": one character but "/". */
  | { k: "one" }
  /** "[...]": one character of the class. */
  | { k: "cls"; has: (c: string) => boolean }
  /** "*": any run of characters but "/". */
  | { k: "star" }
  /** "**" at the end (or before an escaped "/"), at the start or after "/": anything. */
  | { k: "all" }
  /** "**\/" at the start or after "/": nothing, or anything that ends with "/". */
  | { k: "dirs" };

/** One glob (without "!", trailing "/" or leading "/") as tokens. Throws on one git's
 *  wildmatch matches nothing with (see classToken). */
function globTokens(glob: string): Token[] {
  const out: Token[] = [];
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "\\") {
      // A trailing "\\" escapes nothing: git's wildmatch matches nothing with it.
      if (i + 1 === glob.length) throw new SyntaxError("trailing backslash");
      out.push({ k: "lit", c: glob[++i]! });
    } else if (c === "*") {
      i = starToken(glob, i, out);
    } else if (c === "?") {
      out.push({ k: "one" });
    } else if (c === "[") {
      const cls = classToken(glob, i);
      out.push(cls.token);
      i = cls.end;
    } else {
      out.push({ k: "lit", c });
    }
  }
  return out;
}

/** The star or run of stars at glob[i], as git's wildmatch reads it: a run ("***" too) is
 *  "**", which crosses "/" when it is at the start or after a "/", and ends the glob or comes
 *  before a "/" (an escaped one too, "\/", though "**" then never matches nothing, as it
 *  does before a plain "/").
 *  Pushes its token; returns the index of its last character. */
function starToken(glob: string, i: number, out: Token[]): number {
  let end = i;
  while (glob[end + 1] === "*") end++;
  const boundedBefore = i === 0 || glob[i - 1] === "/";
  if (end === i || !boundedBefore) {
    out.push({ k: "star" });
  } else if (glob[end + 1] === "/") {
    out.push({ k: "dirs" });
    return end + 1;
  } else if (end + 1 === glob.length || glob.startsWith("\\/", end + 1)) {
    out.push({ k: "all" });
  } else {
    out.push({ k: "star" });
  }
  return end;
}

/** The POSIX classes git's wildmatch knows ("[[:digit:]]"), as tests of a character code
 *  (ASCII, with git's own isspace: no \f or \v). */
const within = (c: number, lo: string, hi: string) =>
  c >= lo.charCodeAt(0) && c <= hi.charCodeAt(0);
const isAlpha = (c: number) => within(c, "A", "Z") || within(c, "a", "z");
const isDigit = (c: number) => within(c, "0", "9");
const isGraph = (c: number) => c >= 0x21 && c <= 0x7e;
const POSIX_CLASSES: Record<string, (c: number) => boolean> = {
  alnum: (c) => isAlpha(c) || isDigit(c),
  alpha: isAlpha,
  blank: (c) => c === 0x20 || c === 0x09,
  cntrl: (c) => c <= 0x1f || c === 0x7f,
  digit: isDigit,
  graph: isGraph,
  lower: (c) => within(c, "a", "z"),
  print: (c) => c === 0x20 || isGraph(c),
  punct: (c) => isGraph(c) && !isAlpha(c) && !isDigit(c),
  space: (c) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d,
  upper: (c) => within(c, "A", "Z"),
  xdigit: (c) => isDigit(c) || within(c, "A", "F") || within(c, "a", "f"),
};

/** The "[...]" class opening at glob[i], as git's wildmatch reads it: "!" or "^" negates, a
 *  "]" first is a member, "\\x" is x, "a-z" a range (one whose end is below its start
 *  matches nothing; the rest of the class still counts), "[:digit:]" a POSIX class; and the
 *  index of its "]". Throws where wildmatch gives up on the whole pattern (a class that
 *  never closes, an unknown "[:name:]"): the pattern then matches nothing, as in git. */
function classToken(glob: string, i: number): { token: Token; end: number } {
  let p = i + 1;
  const negated = glob[p] === "!" || glob[p] === "^";
  if (negated) p++;
  const tests: Array<(c: number) => boolean> = [];
  const unclosed = () => new SyntaxError(`the class at ${i} never closes`);
  const at = (k: number): string => {
    const c = glob[k];
    if (c === undefined) throw unclosed();
    return c;
  };
  let prev = -1; // the member a "-" makes the start of a range (-1: none)
  do {
    let c = at(p);
    if (c === "\\") c = at(++p);
    else if (c === "-" && prev >= 0 && glob[p + 1] !== undefined && glob[p + 1] !== "]") {
      let hi = at(++p);
      if (hi === "\\") hi = at(++p);
      const [lo, top] = [prev, hi.charCodeAt(0)];
      tests.push((x) => x >= lo && x <= top);
      prev = -1;
      continue;
    } else if (c === "[" && glob[p + 1] === ":") {
      const close = glob.indexOf("]", p + 2);
      if (close < 0) throw unclosed();
      if (close > p + 2 && glob[close - 1] === ":") {
        const posix = POSIX_CLASSES[glob.slice(p + 2, close - 1)];
        if (!posix) throw new SyntaxError(`unknown class ${glob.slice(p, close + 1)}`);
        tests.push(posix);
        p = close;
        prev = -1;
        continue;
      }
      // No ":]": the "[" is a member like any other.
    }
    const code = c.charCodeAt(0);
    tests.push((x) => x === code);
    prev = code;
  } while (at(++p) !== "]");
  const has = (ch: string) => tests.some((t) => t(ch.charCodeAt(0))) !== negated;
  return { token: { k: "cls", has }, end: p };
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
            if (c !== "/" && t.has(c)) nlen = close(next, nlen, 2 * (i + 1));
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

/** `s` with one code unit per UTF-8 byte: git matches bytes, so "?" or "[!a]" is one byte,
 *  never the two of "é" (matched as one character, "caf?" ignored "café", which git keeps). */
function utf8Units(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: ASCII is its own UTF-8
  return /^[\x00-\x7f]*$/.test(s) ? s : Buffer.from(s, "utf8").toString("latin1");
}

/** A line without its trailing spaces, as git trims them: spaces only (a tab is kept), and
 *  not an escaped one ("\\ "); "\\\\ " is an escaped backslash, then a space that goes. */
function trimTrailingSpaces(line: string): string {
  let lastSpace = -1;
  for (let i = 0; i < line.length; i++) {
    if (line[i] === " ") {
      if (lastSpace < 0) lastSpace = i;
    } else {
      if (line[i] === "\\" && ++i === line.length) return line;
      lastSpace = -1;
    }
  }
  return lastSpace < 0 ? line : line.slice(0, lastSpace);
}

/** Parses patterns (lines of a .gitignore file). Invalid ones are skipped, as git does. */
export function parseIgnore(text: string, base = ""): RuleSet {
  const rules: Rule[] = [];
  // A byte order mark (a Windows editor's) is not part of the first pattern, as in git.
  const lines = (text.startsWith("\uFEFF") ? text.slice(1) : text).split("\n");
  for (const raw of lines) {
    // git ends the last line with a "\n" if it has none, then drops the "\r" of each "\r\n".
    let line = trimTrailingSpaces(raw.endsWith("\r") ? raw.slice(0, -1) : raw);
    if (line === "" || line.startsWith("#")) continue;
    let negate = false;
    if (line.startsWith("!")) {
      negate = true;
      line = line.slice(1);
    }
    let dirOnly = false;
    if (line.endsWith("/")) {
      // One "/" only, as git: "foo//" is the pattern "foo/", which no name matches. Escaped
      // or not: "foo\\/" is the directory "foo\" (and "foo\/" the pattern "foo\": nothing).
      dirOnly = true;
      line = line.slice(0, -1);
    }
    if (line === "") continue;
    const anchored = line.includes("/");
    if (line.startsWith("/")) line = line.slice(1);
    if (line === "") continue;
    try {
      const tokens = globTokens(utf8Units(line));
      // Unanchored: the pattern may match below any directory.
      rules.push({
        negate,
        dirOnly,
        matches: matcher(anchored ? tokens : [{ k: "dirs" }, ...tokens]),
      });
    } catch {
      // A pattern git's wildmatch gives up on matches nothing.
    }
  }
  return { base, rules };
}

/**
 * Decides, for a path relative to the workspace root, whether it is ignored, given the rule
 * sets that apply (outermost first: the workspace's patterns, then .gitignore files from
 * the root down; a final set after them all). Returns undefined when no pattern matches.
 */
function verdict(sets: readonly RuleSet[], path: string, isDir: boolean): boolean | undefined {
  let ignored: boolean | undefined;
  for (const set of sets) if (!set.final) ignored = setVerdict(set, path, isDir) ?? ignored;
  for (const set of sets) if (set.final) ignored = setVerdict(set, path, isDir) ?? ignored;
  return ignored;
}

/** What the last pattern of `set` that matches says (undefined: none matches). */
function setVerdict(set: RuleSet, path: string, isDir: boolean): boolean | undefined {
  let rel: string;
  if (set.base === "") rel = path;
  else if (path.startsWith(`${set.base}/`)) rel = path.slice(set.base.length + 1);
  else return undefined;
  rel = utf8Units(rel);
  let ignored: boolean | undefined;
  for (let i = set.rules.length - 1; i >= 0 && ignored === undefined; i--) {
    const r = set.rules[i]!;
    if (r.dirOnly && !isDir) continue;
    if (r.matches(rel)) ignored = !r.negate;
  }
  return ignored;
}

export function isIgnored(sets: readonly RuleSet[], path: string, isDir: boolean): boolean {
  return verdict(sets, path, isDir) === true;
}

/** Whether `path` or a directory above it is ignored (`isDir`: what `path` itself is): a
 *  walk never enters an ignored directory, so nothing under it is there to it. */
export function isIgnoredOrUnder(sets: readonly RuleSet[], path: string, isDir: boolean): boolean {
  const parts = path.split("/");
  return parts.some((_, i) =>
    isIgnored(sets, parts.slice(0, i + 1).join("/"), i < parts.length - 1 || isDir),
  );
}
