// A recorded error read in another process is rebuilt as its public class, so callers can
// use instanceof as well as the code: WorkerLostError (an attempt cut by a crash, the final
// error of a step that kept killing its worker) is public for that.

import { describe, expect, it } from "vitest";
import { errorFromRecord, RunNotFoundError, runNotFound, toErrorRecord } from "./errors.js";
import { CairnError, WorkerLostError } from "./index.js";

describe("errorFromRecord", () => {
  it("rebuilds WORKER_LOST as the exported WorkerLostError", () => {
    const err = errorFromRecord({
      name: "WorkerLostError",
      code: "WORKER_LOST",
      message: 'The worker executing step "edit" stopped',
    });
    expect(err).toBeInstanceOf(WorkerLostError);
    expect(err).toBeInstanceOf(CairnError);
    expect((err as WorkerLostError).code).toBe("WORKER_LOST");
    expect(err.message).toBe('The worker executing step "edit" stopped');
  });
});

describe("errors as data", () => {
  it("a missing run has one wording everywhere and carries its id as a field", () => {
    const err = runNotFound('a "quoted"\u0000id', "nothing to fork");
    expect(err).toBeInstanceOf(RunNotFoundError);
    expect(err.code).toBe("RUN_NOT_FOUND");
    expect(err.runId).toBe('a "quoted"\u0000id');
    expect(err.message).toBe('Run "a \\"quoted\\"\\u0000id" does not exist; nothing to fork');
  });

  it("a recorded code that is not cairn's is rebuilt as a plain Error that keeps it", () => {
    const err = errorFromRecord({ name: "Error", code: "ECONNRESET", message: "socket hang up" });
    expect(err).not.toBeInstanceOf(CairnError);
    expect((err as { code?: string }).code).toBe("ECONNRESET");
    expect(err.message).toBe("socket hang up");
  });
});

describe("toErrorRecord", () => {
  it("records a thrown value that is not an Error, even one whose toString throws", () => {
    const hostile = {
      toString() {
        throw new Error("no text");
      },
    };
    expect(toErrorRecord(hostile)).toEqual({ name: "Error", message: "[object Object]" });
    expect(toErrorRecord(undefined)).toEqual({ name: "Error", message: "undefined" });
    expect(toErrorRecord(null)).toEqual({ name: "Error", message: "null" });
    expect(toErrorRecord(10n)).toEqual({ name: "Error", message: "10" });
  });
});
