// What an approval's asking records of its request: a digest of the request as handed in
// (approval-calls.ts matchAsking compares a replay's request with it). Taken as a child's
// input digest is (child-identity.ts); a request the codec refuses as handed in, for the
// class instances in it, which its schema turns into data it stores (a transform), is
// digested with each instance read as its class's name and own enumerable properties. Such
// an asking held no digest, and a replay asking another such request took the answer given
// to the stored one.

import { createHash } from "node:crypto";
import { encodeInstanceIdentity } from "../codec/codec.js";
import { type ChildCallIdentity, childInputDigests } from "./child-identity.js";

/** Marks a digest that read class instances (compared only with one read so). */
const INSTANCES_READ = "i.";

/** The digests of an approval's request (ChildCallIdentity's `input` and `inputByName`);
 *  `input` undefined for a request neither reading can take (a function in it). */
export function approvalRequestDigests(
  request: unknown,
): Pick<ChildCallIdentity, "input" | "inputByName"> {
  const asData = childInputDigests(request);
  if (asData.input !== undefined) return asData;
  try {
    const text = encodeInstanceIdentity(request);
    return { input: INSTANCES_READ + createHash("sha256").update(text).digest("base64url") };
  } catch {
    return { input: undefined };
  }
}
