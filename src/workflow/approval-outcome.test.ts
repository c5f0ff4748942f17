// What ctx.approval hands the workflow, from an answer or from the timeout.

import { describe, expect, it } from "vitest";
import { answeredApproval, timedOutApproval } from "./approval-outcome.js";

describe("answeredApproval", () => {
  it("carries who answered, when and how, in the order it is recorded", () => {
    const result = answeredApproval(
      { decision: "approved", by: "ana", comment: "ship it", answer: { tag: "v1" }, via: "link" },
      { tag: "v1" },
      1_000,
    );
    expect(result).toEqual({
      approved: true,
      decision: "approved",
      timedOut: false,
      by: "ana",
      at: new Date(1_000),
      via: "link",
      comment: "ship it",
      answer: { tag: "v1" },
    });
    // The recorded text follows the key order: a replay decodes the same object.
    expect(Object.keys(result)).toEqual([
      "approved",
      "decision",
      "timedOut",
      "by",
      "at",
      "via",
      "comment",
      "answer",
    ]);
  });

  it("leaves out a missing comment and answer; the answer given is the checked one", () => {
    const sent = {
      decision: "rejected" as const,
      by: "bo",
      comment: null,
      answer: " raw ",
      via: "cli",
    };
    expect(answeredApproval(sent, undefined, 5)).not.toHaveProperty("comment");
    expect(answeredApproval(sent, undefined, 5)).not.toHaveProperty("answer");
    expect(answeredApproval(sent, "raw", 5)).toMatchObject({ approved: false, answer: "raw" });
  });
});

describe("timedOutApproval", () => {
  it("decides as onTimeout says, at the deadline, with nobody's name", () => {
    expect(timedOutApproval("approve", 9)).toEqual({
      approved: true,
      decision: "approved",
      timedOut: true,
      at: new Date(9),
    });
    expect(timedOutApproval("reject", 9)).toMatchObject({ approved: false, decision: "rejected" });
  });
});
