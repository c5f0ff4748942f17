// Which PID namespace this process lives in, so that a pid read from a worker row is only
// trusted where it means the same process. Containers on host networking share the hostname
// but not the PID namespace: pid 7 there is not pid 7 here, and kill(7, 0) here says
// nothing about it.
//
// Linux: the kernel's boot id (which machine, since which boot) and the inode of
// /proc/self/ns/pid (which PID namespace). Elsewhere, or when /proc cannot be read: null,
// and the hostname alone has to do, as before.

import { readFileSync, statSync } from "node:fs";

let cached: string | null | undefined;

/** This process's PID namespace identity, e.g. "linux:<boot id>:pidns:<inode>", or null. */
export function pidNamespace(): string | null {
  if (cached === undefined) cached = read();
  return cached;
}

function read(): string | null {
  if (process.platform !== "linux") return null;
  try {
    const boot = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    const ns = statSync("/proc/self/ns/pid").ino;
    return boot ? `linux:${boot}:pidns:${ns}` : null;
  } catch {
    return null;
  }
}
