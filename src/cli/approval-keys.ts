// The keys that sign and accept approval links, from $CAIRN_APPROVAL_KEYS
// ("id=secret[,id2=secret2]": the first signs, all verify). Read here for every command.

import { type ApprovalKey, parseApprovalKeys } from "../index.js";
import { CliError, UsageError } from "./command.js";

/** The keys in $CAIRN_APPROVAL_KEYS; none when unset, unless `required` (signing needs one).
 *  Malformed keys are a usage error naming the variable. */
export function approvalKeysFromEnv(
  env: NodeJS.ProcessEnv,
  options: { required: boolean },
): ApprovalKey[] {
  const text = env.CAIRN_APPROVAL_KEYS || "";
  if (text === "") {
    if (!options.required) return [];
    throw new CliError(
      'No approval key: set CAIRN_APPROVAL_KEYS to "id=secret" (a secret of at least 32 characters, e.g. from "openssl rand -base64 32"), the same as the server\'s',
    );
  }
  try {
    return parseApprovalKeys(text);
  } catch (err) {
    throw new UsageError(`CAIRN_APPROVAL_KEYS: ${(err as Error).message}`, { cause: err });
  }
}
