// The one reader of the SQLSTATE of an error PostgreSQL sent: the store's verbs that tell a
// refusal by the server from anything else (a unique key taken, a foreign key raced, a value
// refused, a right or a lock not had) all read it here, and only from pg's DatabaseError.

import pg from "pg";
import { CairnError } from "../../errors.js";
import { isConnectionError } from "./connection.js";

/** The error the server sent (pg's DatabaseError), bare or as the cause of the CairnError
 *  (a StoreError, perhaps wrapped once more) the connection layer made of it; undefined for
 *  anything else, and for an error of the connection: Node's codes (a five-letter one such
 *  as "EPIPE" too, which the shape of an SQLSTATE let through: a connection lost mid-install
 *  was taken for a refusal and the store marked without triggers), and the codes the server
 *  sends as the session ends (connection.ts isConnectionError: class 08, 57P01 of a backend
 *  terminated while the install waited for a lock, 57P02, 57P03, 53300), which were read as
 *  a refusal once the transaction's own retries were spent. */
export function serverError(err: unknown): (pg.DatabaseError & { code: string }) | undefined {
  let e = err instanceof CairnError ? err.cause : err;
  if (e instanceof CairnError) e = e.cause;
  if (!(e instanceof pg.DatabaseError) || isConnectionError(e)) return undefined;
  const code = e.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)
    ? (e as pg.DatabaseError & { code: string })
    : undefined;
}

/** The SQLSTATE of the error the server sent (serverError); undefined otherwise. */
export function sqlState(err: unknown): string | undefined {
  return serverError(err)?.code;
}
