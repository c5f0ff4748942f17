import { describe, expect, it } from "vitest";
import {
  DEFAULT_IGNORE,
  FINAL_DEFAULT_IGNORE,
  isIgnored,
  parseIgnore,
  type RuleSet,
} from "./ignore.js";

const at = (text: string, base = ""): RuleSet[] => [parseIgnore(text, base)];

describe(".gitignore patterns", () => {
  it("a name without a slash matches at any depth; a leading slash anchors it", () => {
    const sets = at("*.log\n/build\n");
    expect(isIgnored(sets, "a.log", false)).toBe(true);
    expect(isIgnored(sets, "deep/er/a.log", false)).toBe(true);
    expect(isIgnored(sets, "a.logx", false)).toBe(false);
    expect(isIgnored(sets, "build", true)).toBe(true);
    expect(isIgnored(sets, "src/build", true)).toBe(false);
  });

  it("a trailing slash matches directories only", () => {
    const sets = at("out/\n");
    expect(isIgnored(sets, "out", true)).toBe(true);
    expect(isIgnored(sets, "x/out", true)).toBe(true);
    expect(isIgnored(sets, "out", false)).toBe(false);
  });

  it("a slash in the middle anchors the pattern to the file's directory", () => {
    const sets = at("docs/*.md\n");
    expect(isIgnored(sets, "docs/a.md", false)).toBe(true);
    expect(isIgnored(sets, "docs/sub/a.md", false)).toBe(false);
    expect(isIgnored(sets, "x/docs/a.md", false)).toBe(false);
  });

  it("** matches across directories", () => {
    const sets = at("**/tmp\na/**/z\nlogs/**\n");
    expect(isIgnored(sets, "tmp", true)).toBe(true);
    expect(isIgnored(sets, "x/y/tmp", false)).toBe(true);
    expect(isIgnored(sets, "a/z", false)).toBe(true);
    expect(isIgnored(sets, "a/b/c/z", false)).toBe(true);
    expect(isIgnored(sets, "logs/one", false)).toBe(true);
    expect(isIgnored(sets, "logs/one/two", false)).toBe(true);
    expect(isIgnored(sets, "logs", true)).toBe(false);
  });

  it("the last match wins and ! re-includes", () => {
    const sets = at("*.log\n!keep.log\n");
    expect(isIgnored(sets, "a.log", false)).toBe(true);
    expect(isIgnored(sets, "keep.log", false)).toBe(false);
    expect(isIgnored(at("!keep.log\n*.log\n"), "keep.log", false)).toBe(true);
  });

  it("?, character classes, escapes, comments and trailing spaces", () => {
    const sets = at("# a comment\nfile?.txt\n[ab]c\n[!x]y\n\\#hash\n\\!bang\nspace\\ \ntrail   \n");
    expect(isIgnored(sets, "file1.txt", false)).toBe(true);
    expect(isIgnored(sets, "file12.txt", false)).toBe(false);
    expect(isIgnored(sets, "ac", false)).toBe(true);
    expect(isIgnored(sets, "cc", false)).toBe(false);
    expect(isIgnored(sets, "zy", false)).toBe(true);
    expect(isIgnored(sets, "xy", false)).toBe(false);
    expect(isIgnored(sets, "#hash", false)).toBe(true);
    expect(isIgnored(sets, "!bang", false)).toBe(true);
    expect(isIgnored(sets, "space ", false)).toBe(true);
    expect(isIgnored(sets, "trail", false)).toBe(true);
    expect(isIgnored(sets, "# a comment", false)).toBe(false);
  });

  it("a deeper .gitignore applies below its directory and overrides the shallower ones", () => {
    const sets = [parseIgnore("*.gen"), parseIgnore("!keep.gen\n/local\n", "pkg")];
    expect(isIgnored(sets, "a.gen", false)).toBe(true);
    expect(isIgnored(sets, "pkg/keep.gen", false)).toBe(false);
    expect(isIgnored(sets, "keep.gen", false)).toBe(true);
    expect(isIgnored(sets, "pkg/local", false)).toBe(true);
    expect(isIgnored(sets, "local", false)).toBe(false);
    expect(isIgnored(sets, "pkgx/local", false)).toBe(false);
  });

  it("the defaults are node_modules and (in a final set) .git, file or directory, anywhere", () => {
    const sets = [...at(DEFAULT_IGNORE.join("\n")), ...at(FINAL_DEFAULT_IGNORE.join("\n"))];
    expect(isIgnored(sets, "node_modules", true)).toBe(true);
    expect(isIgnored(sets, "a/node_modules", true)).toBe(true);
    expect(isIgnored(sets, ".git", true)).toBe(true);
    expect(isIgnored(sets, "sub/.git", false)).toBe(true);
    expect(isIgnored(sets, ".github", true)).toBe(false);
  });

  it("names with regular-expression characters are literal", () => {
    const sets = at("a+b(c).txt\n");
    expect(isIgnored(sets, "a+b(c).txt", false)).toBe(true);
    expect(isIgnored(sets, "aab(c).txt", false)).toBe(false);
  });
});
