// The mark's install tells a refusal by the server (an SQLSTATE: 42501 no right to create
// triggers, 55P03 a lock not had in time) from a lost connection, which it throws. It read any
// five-character code of capitals and digits as an SQLSTATE, so Node's "EPIPE" (a socket whose
// other end went away mid-install) was taken for a refusal: the store was marked without its
// triggers instead of the error reaching the caller.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { StoreError } from "../src/errors.js";
import { sqlState } from "../src/store/postgres/sql-state.js";

const serverError = (code: string) => {
  const e = new pg.DatabaseError("refused", 0, "error");
  e.code = code;
  return e;
};
const nodeError = (code: string) => Object.assign(new Error(`write ${code}`), { code });

describe("sqlState: the server's codes only", () => {
  it("a server's error, bare or wrapped by a StoreError, gives its SQLSTATE", () => {
    expect(sqlState(serverError("42501"))).toBe("42501");
    expect(sqlState(new StoreError("install", { cause: serverError("55P03") }))).toBe("55P03");
  });

  it("Node's codes, five letters or not, and class 08 give none", () => {
    for (const code of ["EPIPE", "EPERM", "ECONNRESET", "ETIMEDOUT"]) {
      expect(sqlState(nodeError(code))).toBeUndefined();
      expect(sqlState(new StoreError("install", { cause: nodeError(code) }))).toBeUndefined();
    }
    expect(sqlState(serverError("08006"))).toBeUndefined();
  });
});
