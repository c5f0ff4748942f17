// Which strings no store can hold exactly, and the three ways cairn deals with them.

import { describe, expect, it } from "vitest";
import {
  checkText,
  displayText,
  escapeLoneSurrogatesInJson,
  isWellFormed,
  unstorableText,
} from "./text.js";

const cut = "👍 great".slice(1);

describe("text", () => {
  it("finds NUL and lone surrogates, and nothing else", () => {
    for (const ok of ["", "plain", "👍 emoji pair", "ünïcødé 中文", "\t\n\r\u0001\u007f"]) {
      expect(unstorableText(ok), ok).toBeUndefined();
    }
    expect(unstorableText("a\u0000b")).toMatch(/NUL/);
    expect(unstorableText(cut)).toMatch(/lone surrogate/);
    expect(unstorableText("x\ud800")).toMatch(/lone surrogate/);
    expect(isWellFormed("\udc00\ud800")).toBe(false);
    expect(isWellFormed("\ud800\udc00")).toBe(true);
  });

  it("checkText throws a TypeError naming the field", () => {
    expect(() => checkText("fine", "run id")).not.toThrow();
    expect(() => checkText(42, "run id")).not.toThrow();
    expect(() => checkText("a\u0000b", 'ctx.step() name in run "r"')).toThrow(TypeError);
    expect(() => checkText(cut, "event name")).toThrow(/^event name .*lone surrogate/);
  });

  it("displayText makes NUL and lone surrogates visible escapes, leaving pairs alone", () => {
    expect(displayText("plain 👍")).toBe("plain 👍");
    expect(displayText(`a\u0000b ${cut}`)).toBe("a\\u0000b \\udc4d great");
    expect(unstorableText(displayText(`\ud800\u0000👍\udfff`))).toBeUndefined();
  });

  it("escapeLoneSurrogatesInJson keeps JSON.parse's answer and makes the text well-formed", () => {
    for (const s of [cut, "\ud800\ud800\udc00", "\\\ud800", "\udc00\udc00"]) {
      const raw = JSON.stringify([s]).replace(/\\u(d[89ab][0-9a-f]{2})/gi, (_, h) =>
        String.fromCharCode(Number.parseInt(h, 16)),
      );
      const fixed = escapeLoneSurrogatesInJson(raw);
      expect(isWellFormed(fixed)).toBe(true);
      expect(JSON.parse(fixed)).toEqual([s]);
    }
  });
});
