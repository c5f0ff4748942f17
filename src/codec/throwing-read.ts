// Where in a value a read throws (a getter, a proxy's trap). The encoder stops on such a
// throw without saying where: what threw is not its own error, so it carries no path, and a
// refusal said only "reading it threw", whatever the depth. Walked only after the encoder
// failed so; it reads the value again as the encoder did (own enumerable keys, array
// indices, Map entries, Set values), so a getter that threw only once is not found again.

/** One part of a value still to read: the read itself, and where it is. */
interface Part {
  read: () => unknown;
  path: string;
}

/** The path of the first read of `root` that throws, in the encoder's notation
 *  (`.config.auth.token`, `[1]`, `.get("k")`); "" for the value itself, undefined when no
 *  read throws now. Read in the encoder's order (depth first, each part when its turn
 *  comes), so the read found is the one the encoder stopped on. */
export function throwingReadPath(root: unknown): string | undefined {
  const seen = new Set<object>();
  // Without recursion: the value may be nested deeper than the stack allows.
  const pending: Part[] = [{ read: () => root, path: "" }];
  for (let part = pending.pop(); part; part = pending.pop()) {
    let value: unknown;
    let parts: Part[];
    try {
      value = part.read();
      if (typeof value !== "object" || value === null || seen.has(value)) continue;
      seen.add(value);
      parts = partsOf(value, part.path);
    } catch {
      return part.path;
    }
    for (let i = parts.length - 1; i >= 0; i--) pending.push(parts[i] as Part);
  }
  return undefined;
}

function partsOf(value: object, path: string): Part[] {
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer || value instanceof Date) {
    return [];
  }
  const parts: Part[] = [];
  if (value instanceof Map) {
    for (const [k, v] of value) {
      const at = `${path}.get(${keyText(k)})`;
      parts.push({ read: () => k, path: at }, { read: () => v, path: at });
    }
    return parts;
  }
  if (value instanceof Set) {
    for (const v of value) parts.push({ read: () => v, path: `${path}.has(...)` });
    return parts;
  }
  const isArray = Array.isArray(value);
  for (const key of Object.keys(value)) {
    const at = isArray && /^\d+$/.test(key) ? `${path}[${key}]` : `${path}${propertyText(key)}`;
    parts.push({ read: () => (value as Record<string, unknown>)[key], path: at });
  }
  return parts;
}

function propertyText(key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/** A Map key as the encoder names it: a primitive as written, anything else as "...". */
function keyText(key: unknown): string {
  if (typeof key === "string") return JSON.stringify(key);
  if (typeof key === "bigint") return `${key}n`;
  if (typeof key === "object" || typeof key === "function" || typeof key === "symbol") {
    return "...";
  }
  return String(key);
}
