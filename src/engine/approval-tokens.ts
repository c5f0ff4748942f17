// Approval links: a signed, expiring token that answers one approval one way (approve or
// reject) without any other credential. Single use comes from the approval itself: it is
// answered once, by whatever comes first (a link, the CLI, the dashboard); every later
// answer, this same link again included, is refused and changes nothing.
//
// Format: ca1.<key id>.<claims>.<signature>
//   claims     base64url(JSON {r: run id, k: approval key, d: "approve" | "reject",
//              e: expiry (ms since the epoch), b?: who the link is for, n: token id,
//              c?: when the run was created, a?: which asking of the approval})
//   signature  base64url(HMAC-SHA256(secret of <key id>, "ca1.<key id>.<claims>"))
// Keys come from configuration only (createEngine({ approvalKeys }), or CAIRN_APPROVAL_KEYS
// for the CLI): the first key signs, every key verifies, so a key is rotated by putting a
// new one first and dropping the old one once its links have expired. There is no default
// key: without one, links can be neither made nor accepted.

import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { ApprovalTokenError } from "../errors.js";

export interface ApprovalKey {
  /** Short name carried in each token (letters, digits, "_", "-"; at most 32). */
  id: string;
  /** At least 32 characters, e.g. `openssl rand -base64 32`. */
  secret: string;
}

export interface ApprovalClaims {
  runId: string;
  /** The approval's key in its run ("review", "review#2"). */
  key: string;
  decision: "approve" | "reject";
  expiresAt: number;
  /** Who the link was made for; recorded as who answered. */
  by?: string;
  /** The token's id (random), recorded with the answer. */
  id: string;
  /** When the run the link was made for was created: a run started later under the same
   *  id (after retention deleted the first) is another run, which the link cannot answer. */
  runCreatedAt?: number;
  /** Which asking of the approval the link answers: how many times the approval call's
   *  error (such as an answer its schema refused) had failed the run when the link was made
   *  (askingOf, RunRecord.failedCalls). A resume asks such an approval anew, and a link made
   *  for an earlier asking must not answer the new one. Absent (links made before it
   *  existed): the first asking. */
  asking?: number;
}

/** The claims as a token carries them. The one-letter names are the token format: links
 *  already sent out carry them, so they stay as they are. */
interface WireClaims {
  /** runId */
  r: string;
  /** key */
  k: string;
  /** decision */
  d: "approve" | "reject";
  /** expiresAt, whole ms */
  e: number;
  /** by, when the link was made for someone */
  b?: string;
  /** id */
  n: string;
  /** runCreatedAt, whole ms */
  c?: number;
  /** asking */
  a?: number;
}

const PREFIX = "ca1";
const KEY_ID = /^[A-Za-z0-9_-]{1,32}$/;
const B64URL = /^[A-Za-z0-9_-]+$/;

/** Checks keys from configuration; throws a TypeError naming what is wrong. */
export function checkApprovalKeys(keys: readonly ApprovalKey[]): void {
  const seen = new Set<string>();
  for (const k of keys) {
    if (!k || typeof k.id !== "string" || !KEY_ID.test(k.id)) {
      throw new TypeError(
        `approval key id ${JSON.stringify(k?.id)} is invalid: 1-32 letters, digits, "_" or "-"`,
      );
    }
    if (typeof k.secret !== "string" || k.secret.length < 32) {
      throw new TypeError(
        `approval key "${k.id}": the secret must be at least 32 characters (e.g. openssl rand -base64 32)`,
      );
    }
    if (seen.has(k.id)) throw new TypeError(`approval key "${k.id}" is given twice`);
    seen.add(k.id);
  }
}

/** Parses "id=secret,id2=secret2" (CAIRN_APPROVAL_KEYS): the first signs, all verify. */
export function parseApprovalKeys(text: string): ApprovalKey[] {
  const keys = text
    .split(",")
    .map((part) => part.trim())
    .filter((part) => part !== "")
    .map((part) => {
      const eq = part.indexOf("=");
      if (eq <= 0) {
        throw new TypeError('approval keys are written "id=secret[,id2=secret2...]"');
      }
      return { id: part.slice(0, eq), secret: part.slice(eq + 1) };
    });
  checkApprovalKeys(keys);
  return keys;
}

function sign(secret: string, kid: string, encodedClaims: string): string {
  return createHmac("sha256", secret)
    .update(`${PREFIX}.${kid}.${encodedClaims}`)
    .digest("base64url");
}

export function createApprovalToken(
  keys: readonly ApprovalKey[],
  claims: Omit<ApprovalClaims, "id"> & { id?: string },
): string {
  const key = keys[0];
  if (!key) {
    throw new ApprovalTokenError(
      "No approval key is configured (createEngine({ approvalKeys }) or CAIRN_APPROVAL_KEYS): approval links cannot be made",
    );
  }
  if (!Number.isFinite(claims.expiresAt)) {
    throw new TypeError("approval link: expiresAt must be a time");
  }
  const wire: WireClaims = {
    r: claims.runId,
    k: claims.key,
    d: claims.decision,
    e: Math.floor(claims.expiresAt),
    n: claims.id ?? randomBytes(12).toString("base64url"),
  };
  if (claims.by !== undefined) wire.b = claims.by;
  if (claims.runCreatedAt !== undefined) wire.c = Math.floor(claims.runCreatedAt);
  if (claims.asking !== undefined) {
    if (!Number.isSafeInteger(claims.asking) || claims.asking < 0) {
      throw new TypeError(
        `approval link: asking must be a whole number >= 0 (got ${claims.asking})`,
      );
    }
    wire.a = claims.asking;
  }
  const encoded = Buffer.from(JSON.stringify(wire), "utf8").toString("base64url");
  return `${PREFIX}.${key.id}.${encoded}.${sign(key.secret, key.id, encoded)}`;
}

/** The claims of a token signed by one of `keys` and not expired at `now`; otherwise an
 *  ApprovalTokenError that says which check failed (never echoing the token). */
export function verifyApprovalToken(
  keys: readonly ApprovalKey[],
  token: string,
  now: number,
): ApprovalClaims {
  if (keys.length === 0) {
    throw new ApprovalTokenError(
      "No approval key is configured here (createEngine({ approvalKeys }) or CAIRN_APPROVAL_KEYS): approval links cannot be accepted",
    );
  }
  const parts = typeof token === "string" ? token.split(".") : [];
  const [prefix, kid, encoded, sig] = parts;
  if (
    parts.length !== 4 ||
    prefix !== PREFIX ||
    !kid ||
    !encoded ||
    !sig ||
    !B64URL.test(encoded) ||
    !B64URL.test(sig)
  ) {
    throw new ApprovalTokenError("This is not an approval link token");
  }
  const key = keys.find((k) => k.id === kid);
  const expected = key ? Buffer.from(sign(key.secret, kid, encoded), "base64url") : undefined;
  const given = Buffer.from(sig, "base64url");
  if (!expected || expected.length !== given.length || !timingSafeEqual(expected, given)) {
    throw new ApprovalTokenError(
      "This approval link's signature is not valid (forged, altered, or made with a key this server does not have); nothing was changed",
    );
  }
  const wire = readWireClaims(encoded);
  if (now >= wire.e) {
    throw new ApprovalTokenError(
      `This approval link expired at ${new Date(wire.e).toISOString()}; nothing was changed. Ask for a new one.`,
    );
  }
  const claims: ApprovalClaims = {
    runId: wire.r,
    key: wire.k,
    decision: wire.d,
    expiresAt: wire.e,
    id: wire.n,
  };
  if (wire.b !== undefined) claims.by = wire.b;
  if (wire.c !== undefined) claims.runCreatedAt = wire.c;
  if (wire.a !== undefined) claims.asking = wire.a;
  return claims;
}

/** The claims segment of a signed token, decoded and checked field by field. */
function readWireClaims(encoded: string): WireClaims {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(Buffer.from(encoded, "base64url").toString("utf8")) as Record<
      string,
      unknown
    >;
  } catch {
    throw new ApprovalTokenError("This approval link's claims cannot be read");
  }
  const { r, k, d, e, b, n, c, a } = body;
  if (
    typeof r !== "string" ||
    typeof k !== "string" ||
    (d !== "approve" && d !== "reject") ||
    typeof e !== "number" ||
    typeof n !== "string" ||
    (b !== undefined && typeof b !== "string") ||
    (c !== undefined && typeof c !== "number") ||
    (a !== undefined && (!Number.isSafeInteger(a) || (a as number) < 0))
  ) {
    throw new ApprovalTokenError("This approval link's claims are incomplete");
  }
  return {
    r,
    k,
    d,
    e,
    n,
    ...(b !== undefined && { b }),
    ...(c !== undefined && { c }),
    ...(a !== undefined && { a: a as number }),
  };
}
