// An event or approval named "." or ".." cannot be named in a URL: every HTTP client (and
// the URL parser in front of the app) resolves such a path segment, "%2E" too, before the
// request is sent, so `POST /runs/r1/events/..` arrives as `POST /runs/r1/`. Those shapes
// are the only way such a request can arrive; they were answered "No API route", which
// neither said why nor what to do. They are answered with a 400 naming the rule instead.

import { HttpError } from "../errors.js";

const SEG = "[^/]+";
/** What a send or an answer becomes once a "." or ".." name is resolved away. */
const RESOLVED_SHAPES = [
  new RegExp(`^/runs/${SEG}/events/$`), // events/.
  new RegExp(`^/runs/${SEG}/$`), // events/..
  new RegExp(`^/runs/${SEG}/approvals/(approve|reject)$`), // approvals/./approve
  new RegExp(`^/runs/${SEG}/(approve|reject)$`), // approvals/../approve
];

/** The 400 for a POST below /api (`apiPath`, e.g. "/runs/r1/") that is what a request for
 *  an event or approval named "." or ".." arrives as; undefined for any other request. */
export function dotSegmentRefusal(method: string, apiPath: string): HttpError | undefined {
  if (method !== "POST" || !RESOLVED_SHAPES.some((shape) => shape.test(apiPath))) {
    return undefined;
  }
  return new HttpError(
    400,
    "VALIDATION",
    `No API route POST "${apiPath}": an event or approval named "." or ".." cannot be sent over HTTP (clients resolve such a path segment, "%2E" too, so the name never reaches the server). Send it with engine.sendEvent() / engine.approve() or \`cairn send\` / \`cairn approve\`, or give the event or approval another name`,
  );
}
