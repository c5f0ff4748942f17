// One reader of PostgreSQL's SQLSTATEs (store/postgres/sql-state.ts): the batch's fallback
// (valueRefused), the lone step insert's taken key, the workspace's foreign-key race and the
// mark's install all read an error's code through sqlState, from pg's DatabaseError only
// (bare, or as the cause of the StoreError the connection layer made of it). valueRefused read
// any `code` along any chain of causes: an error that was not the server's (a Node error, a
// code a library set) with a class 22/23/54 code was taken for a value PostgreSQL refused.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { StoreError } from "../src/errors.js";
import { valueRefused } from "../src/store/postgres/journal-writes.js";
import { sqlState } from "../src/store/postgres/sql-state.js";

const serverError = (code: string, message = "refused") => {
  const e = new pg.DatabaseError(message, 0, "error");
  e.code = code;
  return e;
};

describe("valueRefused reads the server's SQLSTATE through sqlState", () => {
  it("a value refused by the server, bare or wrapped, gives its code and the server's words", () => {
    const e = serverError("22001", "value too long for type character varying(200)");
    expect(valueRefused(e)).toEqual({ code: "22001", message: e.message });
    expect(valueRefused(new StoreError("append", { cause: e }))).toEqual({
      code: "22001",
      message: e.message,
    });
    for (const code of ["23505", "23514", "54000"]) {
      expect(valueRefused(new StoreError("append", { cause: serverError(code) }))?.code).toBe(code);
      expect(valueRefused(serverError(code))?.code).toBe(sqlState(serverError(code)));
    }
  });

  it("other classes, and codes on errors the server did not send, give none", () => {
    for (const code of ["42501", "40001", "55P03", "08006", "57P01"]) {
      expect(valueRefused(serverError(code))).toBeUndefined();
    }
    for (const code of ["22001", "23505", "54000"]) {
      const notTheServers = Object.assign(new Error(`a library's ${code}`), { code });
      expect(valueRefused(notTheServers)).toBeUndefined();
      expect(valueRefused(new StoreError("append", { cause: notTheServers }))).toBeUndefined();
      expect(sqlState(notTheServers)).toBeUndefined();
    }
  });
});
