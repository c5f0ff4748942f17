// A run id as one URL path segment, and back. Run ids "." and ".." cannot be written as
// themselves: every URL client (browsers, fetch, curl, proxies) resolves such a segment,
// "%2E" too, before the request is sent, so `/runs/..` arrives as `/`. They are written
// with a space before them instead (`/runs/%20..`): no run id starts with whitespace (the
// engine refuses one), so " ." and " .." name no other run, and every other segment keeps
// naming the run it named.

/** The path segment naming run `id`: percent-encoded, with "%20" before "." and "..". */
export function runIdSegment(id: string): string {
  return id === "." || id === ".." ? `%20${id}` : encodeURIComponent(id);
}

/** The run id a decoded path segment names: " ." and " .." name "." and "..". */
export function runIdFromSegment(segment: string): string {
  return segment === " ." || segment === " .." ? segment.slice(1) : segment;
}
